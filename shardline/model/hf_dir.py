"""A Hugging Face model directory's files, written from one of our networks and its tokenizer.json.

Contract: `write(dest, model, tokenizer_json, eos, bos, metadata)` writes into the existing
directory `dest`: model.safetensors (no pickle; `metadata` in its header), config.json
(shardline.model.hf), generation_config.json, tokenizer.json (a byte copy), tokenizer_config.json
and special_tokens_map.json, each through fsio (fsynced). EOS is `eos`'s id in the tokenizer,
BOS `bos`'s, or EOS when `bos` is None (as GPT-2 does). It returns the config.json written and
the sha256 of the tokenizer.json as copied. `AutoModelForCausalLM.from_pretrained(dest)` and
`AutoTokenizer.from_pretrained(dest)` load it offline.

Two writers share it, so the model they hand on is the same: shardline.results.export (adds the
lineage and the model card, and renames the directory into place) and
shardline.training.downstream (a directory for lm-evaluation-harness to score during training).
"""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save as safetensors_bytes
from torch import nn

from shardline.core import fsio
from shardline.core.filenames import (HF_CONFIG, HF_GENERATION_CONFIG, HF_SPECIAL_TOKENS, HF_TOKENIZER,
                                      HF_TOKENIZER_CONFIG, HF_WEIGHTS)
from shardline.data import tokenizer as toks
from shardline.model import hf


def write(dest: Path, model: nn.Module, tokenizer_json: Path, eos: str, bos: str | None,
          metadata: dict[str, str]) -> tuple[dict, str]:
    tok = toks.load(tokenizer_json)
    eos_id = toks.token_id(tok, eos)
    bos_id = toks.token_id(tok, bos) if bos else None
    tensors, config = hf.to_hf(model, eos_id, bos_id)
    # bytes, then fsio's fsynced write like every other file (save_file would not fsync); "format": "pt"
    # is what transformers' loader checks for
    fsio.write_bytes(dest / HF_WEIGHTS, safetensors_bytes(tensors, metadata={"format": "pt", **metadata}))
    fsio.write_json(dest / HF_CONFIG, config)
    # pad = eos: GPT-2's convention, so generate() pads finished rows of a batch without asking
    fsio.write_json(dest / HF_GENERATION_CONFIG, {"bos_token_id": config["bos_token_id"], "eos_token_id": eos_id,
                                                  "pad_token_id": eos_id, "do_sample": False})
    copied = fsio.copy_file(tokenizer_json, dest / HF_TOKENIZER)
    specials = {"bos_token": bos or eos, "eos_token": eos}
    fsio.write_json(dest / HF_TOKENIZER_CONFIG, {"tokenizer_class": "PreTrainedTokenizerFast", **specials,
                                                 "model_max_length": model.cfg.seq_len,
                                                 "clean_up_tokenization_spaces": False})
    fsio.write_json(dest / HF_SPECIAL_TOKENS, specials)
    return config, copied
