"""The one mapping between our networks and Hugging Face transformers', both ways.

Contract:
- `names(cfg)` is the single table of the mapping: for every tensor transformers' model of that
  shape holds, our name (None: a bias gpt2 runs without), its name there, and whether it is
  stored transposed (GPT-2's Conv1D holds the transpose of nn.Linear's weight). llama's names are
  transformers' own (LlamaForCausalLM; Qwen3ForCausalLM's q_norm / k_norm with qk_norm). A tied
  head is not in the table: transformers ties it back on load, as save_pretrained stores it.
- Out: `to_hf(model, eos_id, bos_id)` -> (tensors under their names, config.json):
  GPT2LMHeadModel, LlamaForCausalLM or Qwen3ForCausalLM. Every tensor of ours is used exactly
  once, and a bias gpt2 runs without is exported as zeros; anything else raises, naming it: a
  model change must not export silently wrong.
- In: `from_hf(get, names_there, cfg, expected, where)` maps a directory's tensors (`get(name)`
  loads one, `names_there` lists all) onto a network whose state dict has `expected` shapes:
  every tensor exactly once, each shape checked, converted to fp32 one at a time. A missing,
  extra or mis-shaped tensor is a BadInput of one line naming it (shardline.model.imported reads
  the directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import torch
from torch import nn

from shardline.core.errors import BadInput
from shardline.model.shape import ModelConfig

_GPT2_LINEAR = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # nn.Linear here, Conv1D there
_BUFFERS = (".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")  # derived from the config: not weights


def names(cfg: ModelConfig) -> list[tuple[str | None, str, bool]]:
    """(our name or None, their name, transposed) for every tensor of their model (see the contract)."""
    if cfg.arch == "gpt2":
        out = [("transformer.wte.weight", "transformer.wte.weight", False),
               ("transformer.wpe.weight", "transformer.wpe.weight", False)]
        mods = [(f"transformer.h.{i}.{m}", m in _GPT2_LINEAR) for i in range(cfg.n_layer)
                for m in ("ln_1", *_GPT2_LINEAR[:2], "ln_2", *_GPT2_LINEAR[2:])] + [("transformer.ln_f", False)]
        for m, linear in mods:
            out.append((f"{m}.weight", f"{m}.weight", linear))
            out.append((f"{m}.bias" if cfg.bias else None, f"{m}.bias", False))
        return out
    layer = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
             *(["self_attn.q_norm", "self_attn.k_norm"] if cfg.qk_norm else []), "post_attention_layernorm",
             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    keys = ["model.embed_tokens.weight", *(f"model.layers.{i}.{m}.weight" for i in range(cfg.n_layer) for m in layer),
            "model.norm.weight", *([] if cfg.tie_embeddings else ["lm_head.weight"])]
    return [(k, k, False) for k in keys]


# ---------------------------------------------------------------- out


def to_hf(model: nn.Module, eos_id: int, bos_id: int | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    c, ours = model.cfg, model.state_dict()
    if getattr(model, "hf", None) not in ("gpt2", "llama"):  # its class says which mapping it has (common.CausalLM)
        raise BadInput(f"model.arch {c.arch!r} has no mapping to transformers (its class sets no `hf`): only gpt2 and "
                       "llama export; sample, eval and judge take any architecture")
    used = {"lm_head.weight"} if c.tie_embeddings else set()  # the embedding's tensor: tied back on load
    out = {}
    for mine, theirs, transposed in names(c):
        if mine is None:  # a bias gpt2 runs without: zeros, which is what it computes
            width = ours[theirs.replace(".bias", ".weight")].shape[0]
            out[theirs] = torch.zeros(width, dtype=ours["transformer.wte.weight"].dtype)
            continue
        t = ours[mine].detach()
        out[theirs] = (t.t() if transposed else t).contiguous().clone()
        used.add(mine)
    left = sorted(set(ours) - used)
    if left:
        raise BadInput(f"export: no transformers name for {left}; the model changed and shardline/model/hf.py must "
                       "map it before exporting")
    return out, (_gpt2_config(model, eos_id) if c.arch == "gpt2" else _llama_config(c, eos_id, bos_id))


def _llama_config(c: ModelConfig, eos_id: int, bos_id: int | None) -> dict:
    qwen = c.qk_norm
    out = {"architectures": ["Qwen3ForCausalLM" if qwen else "LlamaForCausalLM"],
           "model_type": "qwen3" if qwen else "llama", "vocab_size": c.vocab_size, "hidden_size": c.d_model,
           "intermediate_size": c.mlp_hidden, "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head,
           "num_key_value_heads": c.n_kv_head, "head_dim": c.head_dim, "hidden_act": "silu",
           "max_position_embeddings": c.seq_len, "rms_norm_eps": c.norm_eps,
           # transformers 5 reads rope_parameters, 4.x rope_theta
           "rope_theta": c.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
           "attention_bias": False, "mlp_bias": False, "attention_dropout": c.dropout,
           "tie_word_embeddings": c.tie_embeddings, "initializer_range": 0.02, "use_cache": True,
           "bos_token_id": bos_id if bos_id is not None else eos_id, "eos_token_id": eos_id, "pad_token_id": None,
           "dtype": "float32"}
    if qwen:
        out.update(use_sliding_window=False, sliding_window=None, max_window_layers=c.n_layer,
                   layer_types=["full_attention"] * c.n_layer)
    else:
        out["pretraining_tp"] = 1
    return out


def _gpt2_config(model: nn.Module, eos_id: int) -> dict:
    """config.json of GPT2LMHeadModel, each setting read from the model it must reproduce."""
    c = model.cfg
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": c.vocab_size, "n_positions": c.positions, "n_embd": c.d_model, "n_layer": c.n_layer,
            "n_head": c.n_head, "n_inner": c.mlp_hidden,
            # transformers' ACT2FN names for nn.GELU's two forms
            "activation_function": "gelu" if c.gelu == "exact" else "gelu_pytorch_tanh",
            "layer_norm_epsilon": c.norm_eps,
            # dropout as it trained: only a fine-tune (train mode) sees it
            "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout,
            "initializer_range": 0.02, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "add_cross_attention": False, "tie_word_embeddings": True,
            "use_cache": True, "bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": None,
            "dtype": str(model.lm_head.weight.dtype).removeprefix("torch.")}


# ---------------------------------------------------------------- in


def from_hf(get: Callable[[str], torch.Tensor], names_there: Iterable[str], cfg: ModelConfig,
            expected: dict[str, torch.Size], where: Path) -> dict[str, torch.Tensor]:
    there = set(names_there)
    # GPT-2 files name tensors with or without the `transformer.` prefix (save_pretrained: with)
    alias = {n.removeprefix("transformer."): n for n, _, _ in names(cfg)} if cfg.arch == "gpt2" else {}
    found = {alias.get(n, n): n for n in there}
    out, used = {}, set()
    for mine, theirs, transposed in names(cfg):
        if theirs not in found:
            raise BadInput(f"{where}: tensor {theirs!r} is missing (a {cfg.arch} of this config.json has it)")
        if mine is None:
            raise BadInput(f"{where}: tensor {theirs!r} has no place in a gpt2 without biases")  # params clash first
        t = get(found[theirs])
        want = tuple(expected[mine])
        if tuple(t.shape) != (want[::-1] if transposed else want):
            raise BadInput(f"{where}: tensor {found[theirs]!r} has shape {tuple(t.shape)}, config.json implies "
                           f"{want[::-1] if transposed else want}")
        out[mine] = (t.t() if transposed else t).to(torch.float32).contiguous()
        used.add(found[theirs])
    if cfg.tie_embeddings:
        out["lm_head.weight"] = out["transformer.wte.weight" if cfg.arch == "gpt2" else "model.embed_tokens.weight"]
    extra = [n for n in sorted(there - used) if not n.endswith(_BUFFERS)
             # a tied head some files store beside the embedding: the same values, once
             and not (n == "lm_head.weight" and cfg.tie_embeddings and torch.equal(get(n).float(), out[n]))]
    if extra:
        raise BadInput(f"{where}: tensor {extra[0]!r} maps to nothing in a {cfg.arch} of this config.json "
                       f"({len(extra)} unexpected tensor(s))")
    return out
