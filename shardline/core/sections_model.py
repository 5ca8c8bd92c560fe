"""params.yaml's model section (`Model`: which network, its shape, refused by name where a field is
not its architecture's) and what of it is a run's identity (`identity_of`); one frozen, validated
model, the docstring under a field its documentation. `Params`: shardline.core.config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from shardline.core import plugins
from shardline.core.section_base import _Section


ARCHITECTURES = ("gpt2", "llama")  # built in; a plug-in adds one through "shardline.architectures"
# Fields that only one architecture has: set under another, they are refused by name.
LLAMA_ONLY = ("n_kv_head", "head_dim", "ffn_hidden", "ffn_multiple_of", "rope_theta", "qk_norm")
GPT2_ONLY = ("bias", "gelu")
COMMON = ("n_layer", "n_head", "d_model", "dropout", "norm_eps", "tie_embeddings")  # a plug-in's: these only


class Model(_Section):
    arch: str = "gpt2"
    """gpt2: learned positions, LayerNorm, GELU, multi-head attention (nanoGPT). llama: rotary
    positions (RoPE), RMSNorm, SwiGLU, grouped-query attention, no biases (Llama 2/3; with qk_norm,
    Qwen3). Or the name of an architecture a plug-in adds (docs/extending.md), which takes the
    fields both share. Unset means gpt2, so a params.yaml written before llama existed keeps its
    model (and its runs' identity); the shipped params.yaml sets llama."""
    n_layer: int = Field(2, ge=1)
    """Transformer blocks."""
    n_head: int = Field(4, ge=1)
    """Attention (query) heads per block; must divide d_model unless llama's head_dim is set."""
    d_model: int = Field(128, ge=8)
    """Width of the residual stream (embedding size)."""
    dropout: float = Field(0.1, ge=0, lt=1)
    """Dropout on attention, the residual branches and embeddings while training (llama
    pretraining uses 0)."""
    bias: bool = False
    """gpt2: biases in linear layers and LayerNorms (llama has none)."""
    gelu: Literal["exact", "tanh"] = "exact"
    """gpt2: the GELU of the MLP: exact (erf) or tanh, the approximation OpenAI's GPT-2 weights use
    (transformers' gelu_new); set from the model by train.init_from."""
    norm_eps: float = Field(1e-5, gt=0, lt=1)
    """Epsilon of every LayerNorm (gpt2) or RMSNorm (llama)."""
    n_kv_head: int | None = Field(None, ge=1)
    """llama: key/value heads (grouped-query attention); must divide n_head. Unset: n_head (plain
    multi-head); 1: multi-query."""
    head_dim: int | None = Field(None, ge=2)
    """llama: width of one head (even, for RoPE's pairs). Unset: d_model / n_head."""
    ffn_hidden: int | None = Field(None, ge=1)
    """llama: hidden width of the SwiGLU MLP. Unset: Llama's rule, 2/3 of 4 * d_model rounded up to
    a multiple of ffn_multiple_of (d_model 128 -> 341 -> 512 with 256)."""
    ffn_multiple_of: int = Field(256, ge=1)
    """llama: what Llama's rule rounds ffn_hidden up to (ignored when ffn_hidden is set)."""
    rope_theta: float = Field(10000.0, gt=1)
    """llama: RoPE base; larger spreads the rotary frequencies over longer contexts (Llama 3: 500000)."""
    qk_norm: bool = False
    """llama: RMSNorm over each query and key head before RoPE (Qwen3, OLMo 2); exported as
    Qwen3ForCausalLM, which transformers runs the same way."""
    tie_embeddings: bool = True
    """The output head shares the token embedding's weight. gpt2 always ties; llama may untie
    (Llama 2/3 7B+ do; small models save a vocab x d_model matrix by tying)."""

    @field_validator("arch")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in ARCHITECTURES and v not in plugins.names("architectures"):  # metadata read only then
            raise ValueError(plugins.unknown(v, "architectures", ARCHITECTURES))
        return v

    @model_validator(mode="after")
    def _check(self) -> "Model":
        only = {"llama": LLAMA_ONLY, "gpt2": GPT2_ONLY}
        # a value other than the default, not merely present: a lineage's full dump holds them all
        wrong = [(k, arch) for arch, fields in only.items() if arch != self.arch for k in fields
                 if getattr(self, k) != Model.model_fields[k].default]
        if wrong:
            raise ValueError("\n".join(f"{k}: applies to arch {arch} only, this model is {self.arch}; remove it"
                                        for k, arch in wrong))
        if self.arch == "gpt2" and not self.tie_embeddings:
            raise ValueError("tie_embeddings: gpt2 always ties its output head to the token embedding; "
                             "use arch llama for an untied head")
        if self.arch == "llama" and (self.head_dim or 2) % 2:
            raise ValueError(f"head_dim: {self.head_dim} must be even (RoPE rotates pairs of dimensions)")
        if self.head_dim is None and self.d_model % self.n_head:
            raise ValueError(f"n_head: {self.n_head} must divide d_model ({self.d_model})")
        if self.arch == "llama" and (self.d_model // self.n_head) % 2 and self.head_dim is None:
            raise ValueError(f"n_head: d_model / n_head = {self.d_model // self.n_head} must be even for RoPE; "
                             "change n_head or set head_dim")
        if self.n_kv_head is not None and self.n_head % self.n_kv_head:
            raise ValueError(f"n_kv_head: {self.n_kv_head} must divide n_head ({self.n_head})")
        return self

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_size(self) -> int:
        return self.head_dim or self.d_model // self.n_head

    @property
    def ffn_size(self) -> int:
        """The MLP's hidden width: gpt2 4 * d_model; llama ffn_hidden, or Llama's rule."""
        if self.arch == "gpt2":
            return 4 * self.d_model
        if self.ffn_hidden:
            return self.ffn_hidden
        m = self.ffn_multiple_of
        return m * -(-int(2 * 4 * self.d_model / 3) // m)


def identity_of(section: dict) -> dict:
    """What of a model section (as params or a lineage hold it) shapes the model, as a run's identity
    holds it: the fields of its architecture only, and for gpt2 exactly the five a params.yaml held
    before llama existed (norm_eps and gelu join only when changed), so older runs keep their
    identity; a section without `arch` is gpt2."""
    arch = section.get("arch", "gpt2")
    if arch == "gpt2":
        out = {k: section[k] for k in ("n_layer", "n_head", "d_model", "dropout", "bias")}
        defaults = {"norm_eps": 1e-5, "gelu": "exact"}
        return {**out, **{k: section[k] for k, d in defaults.items() if section.get(k, d) != d}}
    if arch != "llama":  # a plug-in's: the fields it takes
        return {"arch": arch, **{k: section.get(k, Model.model_fields[k].default) for k in COMMON}}
    m = Model.model_validate({k: v for k, v in section.items() if k in Model.model_fields})
    # llama: the shape as resolved, so two spellings of one network (n_kv_head unset or = n_head) are one run
    return {"arch": "llama", "n_layer": m.n_layer, "n_head": m.n_head, "n_kv_head": m.kv_heads, "d_model": m.d_model,
            "head_dim": m.head_size, "ffn_hidden": m.ffn_size, "dropout": m.dropout, "norm_eps": m.norm_eps,
            "rope_theta": m.rope_theta, "qk_norm": m.qk_norm, "tie_embeddings": m.tie_embeddings}
