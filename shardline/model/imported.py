"""A local Hugging Face transformers model directory, read for train.init_from.

Contract:
- `Imported.read(dir, digests=None)` reads config.json (LlamaForCausalLM, MistralForCausalLM
  without a sliding window, Qwen3ForCausalLM, GPT2LMHeadModel) and finds its safetensors weights
  (model.safetensors, or model.safetensors.index.json and the shards it names, each opened to
  check it is readable), with each weight file's sha256 (`digests`, when the caller has them
  from another rank, spares hashing them again). Files only: no network, no transformers.
- `section(params_model)` is the model section the config describes, params.yaml's dropout kept
  (a training setting); a field params.yaml sets to another value is refused, naming both.
- `state(cfg, expected)` loads the tensors under our names (shardline.model.hf.from_hf): each
  once, shape-checked, fp32, one at a time.
- Anything unusable (an unsupported architecture or setting, a missing, null or mistyped config
  value, a malformed index, an unreadable or pickle-only weight file) is a BadInput of one line
  naming the file and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import ValidationError

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.filenames import HF_CONFIG, HF_PICKLES, HF_WEIGHTS, HF_WEIGHTS_INDEX
from shardline.core.sections_model import Model
from shardline.model.shape import ModelConfig
from shardline.model.hf import from_hf

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel")


@dataclass
class Imported:
    where: Path
    architecture: str
    config: dict
    files: dict[str, str] = field(default_factory=dict)  # weight file -> sha256
    weight_map: dict[str, str] = field(default_factory=dict)  # tensor -> weight file

    @classmethod
    def read(cls, where: Path, digests: dict[str, str] | None = None) -> "Imported":
        where = Path(where)
        cfg_path = where / HF_CONFIG
        if not cfg_path.is_file():
            raise BadInput(f"{cfg_path}: not found (train.init_from); point it at a local transformers model directory "
                           "(save_pretrained's config.json, model.safetensors, tokenizer.json)")
        config = _json(cfg_path, dict)
        arch = (config.get("architectures") or [None])[0]
        if arch not in ARCHITECTURES:
            raise BadInput(f"{cfg_path}: architecture {arch!r} is not supported for train.init_from; supported: "
                           f"{', '.join(ARCHITECTURES)}")
        weight_map = _weight_map(where)
        files = sorted(set(weight_map.values()))
        return cls(where, arch, config, digests or {f: fsio.sha256_file(where / f) for f in files}, weight_map)

    # ---- config values, each checked

    def _get(self, key: str, kind=None, default=None, *, required: bool = False):
        v = self.config.get(key, default)
        if v is None and required:
            raise BadInput(f"{self.where / HF_CONFIG}: no {key!r} (or null); a {self.architecture} config needs it")
        if v is None or kind is None:
            return v
        try:
            if kind in (int, float) and isinstance(v, bool) or isinstance(v, (dict, list)):
                raise TypeError
            return kind(v)
        except (TypeError, ValueError):
            raise BadInput(f"{self.where / HF_CONFIG}: {key} = {v!r} is not {kind.__name__}") from None

    def _refuse(self, key: str, value, why: str) -> None:
        raise BadInput(f"{self.where / HF_CONFIG}: {key} = {value!r} is not supported ({why})")

    def _check(self, key: str, ok, default, why: str) -> None:
        v = self.config.get(key, default)
        if not ok(v):
            self._refuse(key, v, why)

    @property
    def vocab_size(self) -> int:
        return self._get("vocab_size", int, required=True)

    @property
    def n_positions(self) -> int:
        return self._get("n_positions", int, 1024) if self.architecture == "GPT2LMHeadModel" else 0

    def _gpt2(self) -> dict:
        g = self._get
        d = g("n_embd", int, 768)
        self._check("n_inner", lambda v: v in (None, 4 * d), None, "the MLP is 4 x n_embd here")
        act = g("activation_function", default="gelu_new")
        gelu = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}.get(act)
        if gelu is None:
            self._refuse("activation_function", act, "gelu, gelu_new or gelu_pytorch_tanh")
        self._check("scale_attn_weights", lambda v: v is True, True, "attention scores are scaled by 1/sqrt(head_dim)")
        self._check("scale_attn_by_inverse_layer_idx", lambda v: not v, False, "not in this GPT-2")
        self._check("tie_word_embeddings", lambda v: v is True, True, "gpt2 ties its head")
        return {"arch": "gpt2", "n_layer": g("n_layer", int, 12), "n_head": g("n_head", int, 12), "d_model": d,
                "bias": True, "gelu": gelu, "norm_eps": g("layer_norm_epsilon", float, 1e-5), "tie_embeddings": True}

    def _llama(self) -> dict:
        g = self._get
        self._check("hidden_act", lambda v: v == "silu", "silu", "llama's MLP is SwiGLU")
        for key in ("attention_bias", "mlp_bias"):
            self._check(key, lambda v: not v, False, "llama here has no biases")
        self._check("pretraining_tp", lambda v: v in (None, 1), 1, "a tensor-parallel split of the weights")
        for key in ("rope_parameters", "rope_scaling"):  # transformers 5's, and 4.x's for the same thing
            rope = g(key) or {}
            if not isinstance(rope, dict):
                self._refuse(key, rope, "a mapping with rope_type and rope_theta")
            kind = rope.get("rope_type", rope.get("type", "default"))
            if kind != "default":
                self._refuse(f"{key}.rope_type", kind, "only plain RoPE, no scaling")
        rope = g("rope_parameters") or {}
        if self.architecture == "MistralForCausalLM":
            self._check("sliding_window", lambda v: v is None, None, "sliding-window attention")
        if self.architecture == "Qwen3ForCausalLM":
            self._check("use_sliding_window", lambda v: not v, False, "sliding-window attention")
        d, heads = g("hidden_size", int, required=True), g("num_attention_heads", int, required=True)
        theta = rope.get("rope_theta", g("rope_theta", float, 10000.0))
        if not isinstance(theta, (int, float)) or isinstance(theta, bool):
            self._refuse("rope_parameters.rope_theta", theta, "a number")
        return {"arch": "llama", "n_layer": g("num_hidden_layers", int, required=True), "n_head": heads, "d_model": d,
                "n_kv_head": g("num_key_value_heads", int) or heads, "head_dim": g("head_dim", int) or d // max(heads, 1),
                "ffn_hidden": g("intermediate_size", int, required=True), "norm_eps": g("rms_norm_eps", float, 1e-6),
                "rope_theta": float(theta), "qk_norm": self.architecture == "Qwen3ForCausalLM",
                "tie_embeddings": bool(g("tie_word_embeddings", default=False))}

    def section(self, params_model: Model) -> dict:
        """The model section this directory describes, params.yaml's dropout kept (see the contract)."""
        mine = self._gpt2() if self.architecture == "GPT2LMHeadModel" else self._llama()
        ours = params_model.model_dump(mode="json")
        clash = [k for k in params_model.model_fields_set if k in mine and ours[k] != mine[k]]
        if clash:
            raise BadInput("model: " + "; ".join(f"{k} is {ours[k]!r} in params.yaml but {mine[k]!r} in "
                                                 f"{self.where / HF_CONFIG}" for k in clash)
                           + " (train.init_from); remove these from params.yaml's model section, or set them to match")
        try:
            return Model(**mine, dropout=params_model.dropout).model_dump(mode="json")
        except ValidationError as e:
            err = e.errors()[0]
            what = err["msg"].removeprefix("Value error, ").split("\n")[0]
            named = f"model.{err['loc'][0]}: {what}" if err["loc"] else f"model.{what}"  # validators name the field
            raise BadInput(f"{self.where / HF_CONFIG}: describes a model the line cannot build ({named})") from None

    def state(self, cfg: ModelConfig, expected: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
        """Its tensors under our names, for a network whose state dict has `expected` shapes."""
        from safetensors import safe_open

        handles: dict[str, object] = {}

        def get(name: str) -> torch.Tensor:
            f = self.weight_map[name]
            if f not in handles:
                handles[f] = safe_open(str(self.where / f), framework="pt")
            return handles[f].get_tensor(name)

        try:
            return from_hf(get, self.weight_map, cfg, expected, self.where)
        except BadInput:
            raise
        except Exception as e:  # a shard torn after it was opened: safetensors' own error
            raise BadInput(f"{self.where}: a weight file could not be read ({e})") from None

    def lineage(self) -> dict:
        return {"from": str(self.where), "architecture": self.architecture, "weights_sha256": self.files}


def _json(path: Path, kind: type):
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, kind):
        raise BadInput(f"{path}: holds a JSON {type(value).__name__}, not an object")
    return value


def _weight_map(where: Path) -> dict[str, str]:
    """tensor name -> weight file, every file checked readable."""
    if (where / HF_WEIGHTS).is_file():
        return {k: HF_WEIGHTS for k in _keys(where / HF_WEIGHTS)}
    if not (where / HF_WEIGHTS_INDEX).is_file():
        pickles = sorted(p.name for p in where.glob(HF_PICKLES))
        raise BadInput(f"{where}: no {HF_WEIGHTS} (nor an index of shards, {HF_WEIGHTS_INDEX})"
                       + (f"; only pickled weights ({pickles[0]}), which the line does not load: re-save them with "
                          "model.save_pretrained(dir, safe_serialization=True)" if pickles else ""))
    wm = _json(where / HF_WEIGHTS_INDEX, dict).get("weight_map")
    if not isinstance(wm, dict) or not wm or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise BadInput(f"{where / HF_WEIGHTS_INDEX}: no weight_map of tensor names to file names")
    for f in sorted(set(wm.values())):
        if Path(f).name != f or not (where / f).is_file():
            raise BadInput(f"{where / HF_WEIGHTS_INDEX}: names {f!r}, which is not a file in {where}")
        missing = {k for k, v in wm.items() if v == f} - set(_keys(where / f))
        if missing:
            raise BadInput(f"{where / HF_WEIGHTS_INDEX}: {f} holds no tensor {sorted(missing)[0]!r}, which the index "
                           "places there")
    return wm


def _keys(path: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as h:
            return list(h.keys())
    except Exception as e:  # safetensors raises its own SafetensorError for a torn or foreign file
        raise BadInput(f"{path}: not a readable safetensors file ({e})") from None
