"""The full shape of a network, and the parameter and FLOP counts that MFU is computed from.

Contract:
- `ModelConfig` is everything `build` needs and nothing else: params.yaml's model section as it
  applies to the architecture, plus what comes from elsewhere: vocab_size (the tokenizer, or an
  imported model's embedding), seq_len (the shards), the attention mode (train.attention) and the
  document-boundary ids (the tokenizer's EOS and BOS). It is frozen and JSON-able.
- `resolve(section, ...)` derives the values the section leaves to a rule (llama's n_kv_head,
  head_dim, ffn_hidden), so two sections that mean the same network give equal configs. A
  plug-in's architecture gets the fields every architecture has (and the rest at their defaults).
- `flops_per_token(cfg, matmul_params)` is the count torchtitan, nanoGPT and PaLM use for MFU:
  6 * N + 12 * L * H * Q * T, with N the parameters that take part in a matmul per token (all but
  lookup tables: the position table, and an untied token embedding; a tied one counts once, as
  the output head), H the query heads, Q the head width and T seq_len. The attention term counts
  the full T x T score matrix, causal or by document: the convention, not the work done.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.core.sections_model import Model


@dataclass(frozen=True)
class ModelConfig:
    arch: str                   # "gpt2" | "llama" | a plug-in's (shardline.model.build)
    vocab_size: int
    seq_len: int
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    # gpt2
    bias: bool = False
    gelu: str = "exact"         # "exact" | "tanh"
    n_positions: int = 0        # rows of the position table; 0: seq_len (more when imported from a longer model)
    # llama
    n_kv_head: int = 0          # 0: n_head (resolved on construction, as head_dim)
    head_dim: int = 0           # 0: d_model // n_head
    ffn_hidden: int = 0         # 0: 4 * d_model (gpt2)
    rope_theta: float = 10000.0
    qk_norm: bool = False
    # attention
    attention: str = "causal"   # "causal" | "document"
    eos_id: int | None = None   # a document ends after EOS...
    bos_id: int | None = None   # ...and starts at BOS

    def __post_init__(self):
        if not self.arch:  # which names exist is the model section's to say (a plug-in's too)
            raise ValueError("arch: empty")
        if min(self.vocab_size, self.seq_len, self.n_layer, self.n_head) < 1:
            raise ValueError("vocab_size, seq_len, n_layer and n_head must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not self.head_dim and self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        # what is left to a rule, resolved here: every field then holds the value the network uses
        object.__setattr__(self, "n_kv_head", self.n_kv_head or self.n_head)
        object.__setattr__(self, "head_dim", self.head_dim or self.d_model // self.n_head)
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_kv_head {self.n_kv_head} must divide n_head {self.n_head}")
        if self.attention not in ("causal", "document"):
            raise ValueError(f"attention: {self.attention!r} is not causal or document")
        if self.attention == "document" and self.eos_id is None and self.bos_id is None:
            raise ValueError("attention document needs the EOS or BOS id that marks a document boundary")

    @property
    def mlp_hidden(self) -> int:
        return self.ffn_hidden or 4 * self.d_model

    @property
    def positions(self) -> int:
        return self.n_positions or self.seq_len


def resolve(section: dict, *, vocab_size: int, seq_len: int, attention: str = "causal", eos_id: int | None = None,
            bos_id: int | None = None, n_positions: int = 0) -> ModelConfig:
    """The network a model section (as `Params.section("model")` or a lineage holds it) describes."""
    m = Model.model_validate({k: v for k, v in section.items() if k in Model.model_fields})
    common = dict(arch=m.arch, vocab_size=vocab_size, seq_len=seq_len, n_layer=m.n_layer, n_head=m.n_head,
                  d_model=m.d_model, dropout=m.dropout, norm_eps=m.norm_eps, tie_embeddings=m.tie_embeddings,
                  attention=attention, eos_id=eos_id, bos_id=bos_id)
    if m.arch == "gpt2":
        return ModelConfig(**common, bias=m.bias, gelu=m.gelu, n_positions=n_positions)
    if m.arch != "llama":  # a plug-in's takes the fields every architecture has
        return ModelConfig(**common)
    return ModelConfig(**common, n_kv_head=m.kv_heads, head_dim=m.head_size, ffn_hidden=m.ffn_size,
                       rope_theta=m.rope_theta, qk_norm=m.qk_norm)


def flops_per_token(cfg: ModelConfig, matmul_params: int) -> float:
    """Training FLOPs per token, forward and backward (see the module contract)."""
    return float(6 * matmul_params + 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * cfg.seq_len)
