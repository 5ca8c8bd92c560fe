"""The one mapping between our networks and Hugging Face transformers', both ways.

Contract:
- Out: `to_hf(model, eos_id, bos_id)` -> (tensors under transformers' names, config.json). gpt2
  becomes GPT2LMHeadModel (its Conv1D holds the transpose of nn.Linear's weight; where ours has no
  biases the export holds zeros); llama becomes LlamaForCausalLM, or Qwen3ForCausalLM with
  qk_norm. A tied head is stored once, as save_pretrained stores it. Every tensor of ours is used
  exactly once or this raises: a model change must not export silently wrong.
- In: `Imported.read(dir)` reads a local transformers directory: config.json (LlamaForCausalLM,
  MistralForCausalLM without a sliding window, Qwen3ForCausalLM, GPT2LMHeadModel) and its
  safetensors weights (model.safetensors, or model.safetensors.index.json and its shards), with
  each weight file's sha256. `section(params_model)` is the model section it describes, with the
  dropout of params.yaml (a training setting); a field params.yaml sets to another value is
  refused, naming both. `state(cfg)` maps its tensors to our names: every tensor exactly once,
  each shape checked against the network `cfg` builds. Anything else (an unsupported
  architecture or setting, a missing, extra or mis-shaped tensor, pickle-only weights) is a
  BadInput of one line naming it.
- Reads no network and imports neither transformers nor torch.hub: files only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.sections_run import Model
from shardline.model.config import ModelConfig

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel")
_GPT2_LINEAR = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # nn.Linear here, Conv1D there
_GPT2_BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask old GPT-2 files carry: not weights


# ---------------------------------------------------------------- out


def to_hf(model: nn.Module, eos_id: int, bos_id: int | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    c = model.cfg
    tensors = _gpt2_out(model) if c.arch == "gpt2" else _llama_out(model)
    return tensors, (_gpt2_config(model, eos_id) if c.arch == "gpt2" else _llama_config(c, eos_id, bos_id))


def _llama_out(model: nn.Module) -> dict[str, torch.Tensor]:
    ours = model.state_dict()
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    return {k: v.detach().contiguous().clone() for k, v in ours.items() if not (tied and k == "lm_head.weight")}


def _llama_config(c: ModelConfig, eos_id: int, bos_id: int | None) -> dict:
    qwen = c.qk_norm
    out = {"architectures": ["Qwen3ForCausalLM" if qwen else "LlamaForCausalLM"],
           "model_type": "qwen3" if qwen else "llama", "vocab_size": c.vocab_size, "hidden_size": c.d_model,
           "intermediate_size": c.mlp_hidden, "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head,
           "num_key_value_heads": c.kv_heads, "head_dim": c.head_size, "hidden_act": "silu",
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


def _gpt2_out(model: nn.Module) -> dict[str, torch.Tensor]:
    ours, c = model.state_dict(), model.cfg
    used = {"lm_head.weight"}  # the same tensor as wte: transformers ties it back on load

    def take(name: str, transpose: bool = False) -> torch.Tensor:
        used.add(name)
        t = ours[name].detach()
        return (t.t() if transpose else t).contiguous().clone()

    def bias(module: str, n: int) -> torch.Tensor:
        name = f"{module}.bias"
        return take(name) if name in ours else torch.zeros(n, dtype=ours["transformer.wte.weight"].dtype)

    out = {k: take(k) for k in ("transformer.wte.weight", "transformer.wpe.weight")}
    for i in range(c.n_layer):
        for m in (f"transformer.h.{i}.ln_1", f"transformer.h.{i}.ln_2"):
            out[f"{m}.weight"], out[f"{m}.bias"] = take(f"{m}.weight"), bias(m, c.d_model)
        for m in (f"transformer.h.{i}.{n}" for n in _GPT2_LINEAR):
            w = take(f"{m}.weight", transpose=True)  # [in, out]
            out[f"{m}.weight"], out[f"{m}.bias"] = w, bias(m, w.shape[1])
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = take("transformer.ln_f.weight"), \
        bias("transformer.ln_f", c.d_model)
    left = sorted(set(ours) - used)
    if left:
        raise BadInput(f"export: no GPT-2 name for {left}; the model changed and shardline/model/hf.py must map it "
                       "before exporting")
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


@dataclass
class Imported:
    """A transformers model directory, read for train.init_from."""

    where: Path
    architecture: str
    config: dict
    files: dict[str, str] = field(default_factory=dict)  # weight file -> sha256
    weight_map: dict[str, str] = field(default_factory=dict)  # tensor -> weight file

    @classmethod
    def read(cls, where: Path) -> "Imported":
        where = Path(where)
        cfg_path = where / "config.json"
        if not cfg_path.is_file():
            raise BadInput(f"{cfg_path}: not found (train.init_from); point it at a local transformers model directory "
                           "(save_pretrained's config.json, model.safetensors, tokenizer.json)")
        try:
            config = json.loads(cfg_path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise BadInput(f"{cfg_path}: not valid JSON ({e})") from None
        arch = (config.get("architectures") or [None])[0]
        if arch not in ARCHITECTURES:
            raise BadInput(f"{cfg_path}: architecture {arch!r} is not supported for train.init_from; supported: "
                           f"{', '.join(ARCHITECTURES)}")
        index = where / "model.safetensors.index.json"
        if (where / "model.safetensors").is_file():
            files = ["model.safetensors"]
            weight_map = {k: files[0] for k in _keys(where / files[0])}
        elif index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        else:
            pickles = [p.name for p in where.glob("*.bin")]
            raise BadInput(f"{where}: no model.safetensors (nor an index of shards)"
                           + (f"; only pickled weights ({pickles[0]}), which the line does not load: re-save them with "
                              "model.save_pretrained(dir, safe_serialization=True)" if pickles else ""))
        return cls(where, arch, config, {f: fsio.sha256_file(where / f) for f in files}, weight_map)

    def _get(self, key: str, default=None, *, required: bool = False):
        if key not in self.config and required:
            raise BadInput(f"{self.where / 'config.json'}: no {key!r}; a {self.architecture} config needs it")
        return self.config.get(key, default)

    def _refuse(self, key: str, value, why: str) -> None:
        raise BadInput(f"{self.where / 'config.json'}: {key} = {value!r} is not supported ({why})")

    def _check(self, key: str, ok, default, why: str) -> None:
        v = self.config.get(key, default)
        if not ok(v):
            self._refuse(key, v, why)

    @property
    def vocab_size(self) -> int:
        return int(self._get("vocab_size", required=True))

    @property
    def n_positions(self) -> int:
        return int(self._get("n_positions", 1024)) if self.architecture == "GPT2LMHeadModel" else 0

    def _section(self) -> dict:
        g = self._get
        if self.architecture == "GPT2LMHeadModel":
            d = int(g("n_embd", 768))
            self._check("n_inner", lambda v: v in (None, 4 * d), None, "the MLP is 4 x n_embd here")
            act = g("activation_function", "gelu_new")
            gelu = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}.get(act)
            if gelu is None:
                self._refuse("activation_function", act, "gelu, gelu_new or gelu_pytorch_tanh")
            self._check("scale_attn_by_inverse_layer_idx", lambda v: not v, False, "not in this GPT-2")
            self._check("tie_word_embeddings", lambda v: v, True, "gpt2 ties its head")
            return {"arch": "gpt2", "n_layer": int(g("n_layer", 12)), "n_head": int(g("n_head", 12)), "d_model": d,
                    "bias": True, "gelu": gelu, "norm_eps": float(g("layer_norm_epsilon", 1e-5)),
                    "tie_embeddings": True}
        self._check("hidden_act", lambda v: v == "silu", "silu", "llama's MLP is SwiGLU")
        for key in ("attention_bias", "mlp_bias"):
            self._check(key, lambda v: not v, False, "llama here has no biases")
        self._check("pretraining_tp", lambda v: v in (None, 1), 1, "a tensor-parallel split of the weights")
        rope = g("rope_parameters") or g("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            self._refuse("rope_parameters.rope_type", kind, "only plain RoPE, no scaling")
        if self.architecture == "MistralForCausalLM":
            self._check("sliding_window", lambda v: v is None, None, "sliding-window attention")
        if self.architecture == "Qwen3ForCausalLM":
            self._check("use_sliding_window", lambda v: not v, False, "sliding-window attention")
        d, heads = int(g("hidden_size", required=True)), int(g("num_attention_heads", required=True))
        return {"arch": "llama", "n_layer": int(g("num_hidden_layers", required=True)), "n_head": heads, "d_model": d,
                "n_kv_head": int(g("num_key_value_heads") or heads), "head_dim": int(g("head_dim") or d // heads),
                "ffn_hidden": int(g("intermediate_size", required=True)), "norm_eps": float(g("rms_norm_eps", 1e-6)),
                "rope_theta": float(rope.get("rope_theta", g("rope_theta", 10000.0))),
                "qk_norm": self.architecture == "Qwen3ForCausalLM",
                "tie_embeddings": bool(g("tie_word_embeddings", False))}

    def section(self, params_model) -> dict:
        """The model section this directory describes, params.yaml's dropout kept (see the contract)."""
        mine = self._section()
        ours = params_model.model_dump(mode="json")
        clash = [k for k in params_model.model_fields_set if k in mine and ours[k] != mine[k]]
        if clash:
            raise BadInput("model: " + "; ".join(f"{k} is {ours[k]!r} in params.yaml but {mine[k]!r} in "
                                                 f"{self.where / 'config.json'}" for k in clash)
                           + " (train.init_from); remove these from params.yaml's model section, or set them to match")
        return Model(**mine, dropout=params_model.dropout).model_dump(mode="json")

    def state(self, cfg: ModelConfig, expected: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
        """Its tensors under our names, for a network whose state dict has `expected` shapes."""
        from safetensors import safe_open

        theirs: dict[str, torch.Tensor] = {}
        for f in self.files:
            with safe_open(str(self.where / f), framework="pt") as h:
                theirs.update({k: h.get_tensor(k) for k in h.keys()})
        gpt2 = cfg.arch == "gpt2"
        out, used = {}, set()
        for ours, shape in expected.items():
            name = _gpt2_name(ours, theirs) if gpt2 else ours
            if ours == "lm_head.weight" and cfg.tie_embeddings:
                continue  # tied: the embedding's tensor
            if name not in theirs:
                raise BadInput(f"{self.where}: tensor {name!r} is missing from {', '.join(self.files)} "
                               f"({self.architecture} with this config.json has it)")
            t = theirs[name]
            if gpt2 and any(ours.endswith(f"{m}.weight") for m in _GPT2_LINEAR):
                t = t.t()  # Conv1D [in, out] -> nn.Linear [out, in]
            if tuple(t.shape) != tuple(shape):
                raise BadInput(f"{self.where}: tensor {name!r} has shape {tuple(theirs[name].shape)}, config.json "
                               f"implies {tuple(shape)}")
            out[ours] = t.to(torch.float32).contiguous()
            used.add(name)
        if cfg.tie_embeddings:
            out["lm_head.weight"] = out["transformer.wte.weight" if gpt2 else "model.embed_tokens.weight"]
        extra = [k for k in theirs if k not in used and not _ignorable(k, theirs, out, cfg)]
        if extra:
            raise BadInput(f"{self.where}: tensor {extra[0]!r} maps to nothing in a {self.architecture} with this "
                           f"config.json ({len(extra)} unexpected tensor(s))")
        return out

    def lineage(self) -> dict:
        return {"from": str(self.where), "architecture": self.architecture, "weights_sha256": self.files}


def _keys(path: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as h:
            return list(h.keys())
    except Exception as e:  # safetensors raises its own SafetensorError for a torn or foreign file
        raise BadInput(f"{path}: not a readable safetensors file ({e})") from None


def _gpt2_name(ours: str, theirs: dict) -> str:
    """GPT-2 files name tensors with or without the `transformer.` prefix (save_pretrained: with)."""
    return ours if ours in theirs or ours == "lm_head.weight" else ours.removeprefix("transformer.")


def _ignorable(name: str, theirs: dict, out: dict, cfg: ModelConfig) -> bool:
    if name.endswith(_GPT2_BUFFERS) or name.endswith("rotary_emb.inv_freq"):
        return True  # buffers derived from the config, not weights
    # a tied head some files store beside the embedding: the same values, once
    return name == "lm_head.weight" and cfg.tie_embeddings and torch.equal(theirs[name].float(), out["lm_head.weight"])
