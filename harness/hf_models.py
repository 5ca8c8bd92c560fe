"""Small Hugging Face models and tokenizers, built here by transformers and tokenizers themselves
(never downloaded): the inputs of train.init_from and the tokenizers teams bring.

- `sentencepiece_tokenizer(texts, vocab_size, style)`: a SentencePiece-style BPE with byte
  fallback (`<0x00>`..`<0xFF>` after `<unk> <s> </s>`, as Llama 2 and Mistral number them),
  trained on `texts`. style "metaspace": a Metaspace pre-tokenizer and decoder (prepend_scheme
  first: what `legacy=False` conversions write); style "llama2": Llama 2's tokenizer.json, a
  Prepend/Replace normalizer and a Replace, ByteFallback, Fuse, Strip decoder.
- `wide_tokenizer(texts, extra)`: a byte-level BPE whose ordinary tokens all have ids above
  `extra` filler entries, so every id the data makes needs uint32 (a vocabulary over 65,535).
- `save_model(dest, arch, tokenizer, **config)`: a seeded random transformers model of `arch`
  with `config`, saved by save_pretrained (safetensors) beside the tokenizer's tokenizer.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import tokenizers
import torch
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

SP_SPECIALS = ["<unk>", "<s>", "</s>"]
BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _with_byte_tokens(tok: tokenizers.Tokenizer, first: int) -> dict:
    """The tokenizer's JSON with the 256 byte tokens at ids first.., every other ordinary id after them."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    ordinary = sorted((i, t) for t, i in vocab.items() if i >= first)
    new = {t: i for t, i in vocab.items() if i < first}
    new.update({b: first + n for n, b in enumerate(BYTES)})
    new.update({t: first + 256 + n for n, (_, t) in enumerate(ordinary)})
    spec["model"]["vocab"] = new
    return spec


def sentencepiece_tokenizer(texts: list[str], vocab_size: int = 600, style: str = "metaspace") -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    if style == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size - 256, special_tokens=SP_SPECIALS,
                                                       min_frequency=2, show_progress=False))
    spec = _with_byte_tokens(tok, len(SP_SPECIALS))
    spec["model"]["byte_fallback"] = True
    if style == "metaspace":
        spec["decoder"] = {"type": "Sequence", "decoders": [  # bytes first, then ▁ -> space, the first one dropped
            {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]}
    else:  # Llama 2's own
        spec["pre_tokenizer"] = None
        spec["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def wide_tokenizer(texts: list[str], extra: int = 66_000, vocab_size: int = 700) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    # fillers take ids 1..extra (after the special token), never produced by the merges
    shifted = {t: (i + extra if i > 0 else 0) for t, i in vocab.items()}
    shifted.update({f"<|filler{n}|>": 1 + n for n in range(extra)})
    spec["model"]["vocab"] = shifted
    for a in spec["added_tokens"]:
        a["id"] = shifted[a["content"]]
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def save_model(dest: Path, arch: str, tokenizer: tokenizers.Tokenizer, seed: int = 0, shard_size: str | None = None,
               **config) -> Path:
    """A random `arch` (LlamaForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, GPT2LMHeadModel)
    saved under `dest` with tokenizer.json (`shard_size`: in safetensors shards with an index, as
    save_pretrained writes a large model); norms and biases drawn too, so they count in a comparison."""
    import transformers

    kind = {"LlamaForCausalLM": "LlamaConfig", "Qwen3ForCausalLM": "Qwen3Config",
            "MistralForCausalLM": "MistralConfig", "GPT2LMHeadModel": "GPT2Config"}[arch]
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(getattr(transformers, kind)(**config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if "norm" in name or "ln_" in name else 0.0, 0.2)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True, **({"max_shard_size": shard_size} if shard_size else {}))
    tokenizer.save(str(dest / "tokenizer.json"))
    return dest
