"""Byte-level BPE tokenizer: train, store, and encode documents fast.

Contract:
- `train_bpe` is deterministic: the same texts in the same order give a byte-identical
  tokenizer.json. Special tokens get ids 0..k-1 in the order given.
- `save` writes tokenizer.json atomically and returns its sha256 (the "tokenizer hash" that
  shards record); `load` and `token_id` raise BadInput naming the file or token.
- `Encoder.encode_batch(texts)` returns, for every backend, exactly the ids of the HF
  tokenizer's `encode(text, add_special_tokens=False)` with special-token strings in the text
  encoded as ordinary text, and with truncation and padding off. `auto` takes the fastest
  backend that gives HF's ids on every probe text: fastokens (a Rust reimplementation of HF's
  pipeline, ~4x tiktoken here), then tiktoken (only when the vocabulary passes the static checks
  in bytebpe.to_tiktoken, which make tiktoken's merge rule provably equal to HF's), then HF itself;
  `reason` says why each faster one was passed over. riptoken 0.2.4 (tiktoken's BPE in other
  Rust, 1.7x tiktoken here) was measured and left out: before a word, a run of ~1,000 or more
  spaces gets other ids from it than from tiktoken and HF, which a probe of ordinary text misses.
- Texts holding lone surrogates raise BadInput on both backends (HF rejects them; tiktoken
  would silently replace them, so we refuse rather than let backends disagree).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.remedies import remedy
from shardline.data import bytebpe

BACKENDS = ("auto", "fastokens", "tiktoken", "hf")


def train_bpe(texts: Iterable[str], *, vocab_size: int, special_tokens: Sequence[str],
              min_frequency: int = 2) -> tokenizers.Tokenizer:
    """Train a byte-level BPE tokenizer on `texts` (consumed once, in order)."""
    specials = list(special_tokens)
    if len(set(specials)) != len(specials) or not all(specials):
        raise BadInput(f"special_tokens must be distinct non-empty strings, got {specials!r}")
    if vocab_size < 256 + len(specials):
        raise BadInput(f"vocab_size {vocab_size} is below 256 bytes + {len(specials)} special "
                       "tokens; raise tokenizer.vocab_size")
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
        # All 256 bytes, even unseen ones, so any text encodes without an unk token.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(specials):  # the trainer's documented behaviour; guard it anyway
        if tok.token_to_id(s) != i:
            raise RuntimeError(f"special token {s!r} got id {tok.token_to_id(s)}, expected {i}")
    return tok


def save(tok: tokenizers.Tokenizer, path: Path) -> str:
    """Write tokenizer.json atomically; return the sha256 of the bytes written."""
    data = tok.to_str().encode("utf-8")
    fsio.write_bytes(path, data)
    return fsio.sha256_bytes(data)


def load(path: Path) -> tokenizers.Tokenizer:
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception for bad JSON or schema
        raise BadInput(f"{path}: cannot load tokenizer.json ({e}); re-run the tokenizer "
                       "stage or point to a tokenizer.json written by shardline") from e


# what readers take of data/tokenizer/meta.json (the tokenize stage writes it): its sha256 always,
# the rest where a reader needs it, of these types when there
META = {"sha256": str}
META_IF_THERE = {"key": str, "vocab_size": int, "eos_id": int, "bos_id": (int, type(None)), "dtype": str}


def read_meta(path: Path, layout) -> dict:
    """data/tokenizer/meta.json (`path`, of the project `layout`), checked: damage is one line naming
    it and what rebuilds it; a missing file stays FileNotFoundError (each reader says why it needs it)."""
    meta = fsio.read_record(path, remedy(layout, path), keys=META, shown=layout.rel(path))
    return fsio.check_fields(meta, {k: t for k, t in META_IF_THERE.items() if k in meta}, layout.rel(path),
                             remedy(layout, path))


def token_id(tok: tokenizers.Tokenizer, token: str) -> int:
    i = tok.token_to_id(token)
    if i is None:
        raise BadInput(f"token {token!r} is not in the tokenizer vocabulary "
                       f"({tok.get_vocab_size()} entries); list it in special_tokens when training")
    return i


def _check_texts(texts: list[str]) -> None:
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise BadInput(f"document {i} is {type(t).__name__}, not str")
        if not t.isascii():  # O(1) in CPython; only non-ASCII text can hold surrogates
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as e:
                raise BadInput(f"document {i} holds a lone surrogate at char {e.start}; decode "
                               "input with errors='replace' upstream") from None


def _fastokens(hf: tokenizers.Tokenizer, probes: list[str], want: list[list[int]], named: bool) -> "Encoder | str":
    """The fastokens encoder of `hf`, or why not. It reads the same tokenizer.json and runs HF's
    pipeline in Rust; identity is proven on the probe (there is no static proof), or, `named`
    without probes, was proven by whoever named it (the stage's driver, for its workers)."""
    try:
        import fastokens
    except ImportError:
        return "fastokens is not installed"
    try:
        fast = fastokens.Tokenizer.from_json_str(hf.to_str())
    except Exception as e:  # its errors are bare; any of them means: not this backend
        return f"fastokens cannot load this tokenizer ({e})"
    fast.no_truncation()
    fast.no_padding()

    def arrays(texts: list[str]) -> list[np.ndarray]:
        # one flat buffer per batch (no Python int per id); split_special_tokens: "<|endoftext|>"
        # in a document is text, as for the other backends. It releases the GIL while it encodes.
        ids, offsets = fast.encode_batch_flat(texts, split_special_tokens=True)
        ids, offsets = np.frombuffer(ids, np.uint32), np.frombuffer(offsets, np.uint64).astype(np.intp)
        return [ids[offsets[i]:offsets[i + 1]] for i in range(len(texts))]

    if not probes:
        return Encoder("fastokens", "fastokens named (proven on the driver's probe)",
                       lambda texts: [a.tolist() for a in arrays(texts)], arrays) if named else \
            "fastokens has no static proof of identity and no probe docs were given"
    got = arrays(probes)
    bad = next((i for i, (w, g) in enumerate(zip(want, got)) if g.tolist() != w), None)
    if bad is not None:
        return f"fastokens ids differ from hf on probe doc {bad} ({len(want[bad])} vs {len(got[bad])} tokens)"
    return Encoder("fastokens", f"fastokens ids identical on {len(probes)} probe docs",
                   lambda texts: [a.tolist() for a in arrays(texts)], arrays)


class Encoder:
    """Encodes documents to token ids with the fastest backend PROVEN identical to the HF tokenizer."""

    backend: str  # "fastokens", "tiktoken" or "hf"
    reason: str   # why this backend was chosen

    def __init__(self, backend: str, reason: str, fn: Callable[[list[str]], list[list[int]]],
                 arrays: Callable[[list[str]], list[np.ndarray]] | None = None):
        self.backend, self.reason, self._fn = backend, reason, fn
        self._arrays = arrays or (lambda texts: [np.asarray(ids, dtype=np.uint32) for ids in fn(texts)])

    def __repr__(self) -> str:
        return f"Encoder(backend={self.backend!r}, reason={self.reason!r})"

    @classmethod
    def build(cls, tok: tokenizers.Tokenizer, *, backend: str = "auto",
              probe_texts: Sequence[str] = ()) -> "Encoder":
        if backend not in BACKENDS:
            raise BadInput(f"tokenizer backend {backend!r} is not one of {BACKENDS}")
        # A private copy: we change how it treats specials, truncation and padding, and the
        # caller's tokenizer must stay as it was.
        hf = tokenizers.Tokenizer.from_str(tok.to_str())
        hf.encode_special_tokens = True  # else HF maps "<|endoftext|>" in text to the special id
        hf.no_truncation()
        hf.no_padding()
        batch = getattr(hf, "encode_batch_fast", None) or hf.encode_batch  # _fast: no offsets

        def hf_fn(texts: list[str]) -> list[list[int]]:
            return [e.ids for e in batch(texts, add_special_tokens=False)]

        if backend == "hf":
            return cls("hf", "hf backend requested", hf_fn)
        probes = list(probe_texts)
        _check_texts(probes)
        want = hf_fn(probes) if probes else []
        passed = []  # why each faster backend was not taken

        def fallback(why: str) -> "Encoder":
            if backend != "auto":
                raise BadInput(f"tokenizer backend {backend!r} requested but {why}; use backend 'auto' or 'hf'")
            return cls("hf", "; ".join([*passed, why]), hf_fn)

        if backend in ("auto", "fastokens"):
            fast = _fastokens(hf, probes, want, named=backend == "fastokens")
            if isinstance(fast, Encoder):
                return fast
            if backend == "fastokens":
                return fallback(fast)
            passed.append(fast)
        try:
            enc = bytebpe.to_tiktoken(hf)
        except bytebpe.NotConvertible as e:
            return fallback(f"tiktoken conversion impossible: {e}")
        if probes:
            got = enc.encode_ordinary_batch(probes)
            bad = next((i for i, (w, g) in enumerate(zip(want, got)) if w != g), None)
            if bad is not None:
                return fallback(f"tiktoken ids differ from hf on probe doc {bad} "
                                f"({len(want[bad])} vs {len(got[bad])} tokens)")
            why = f"tiktoken ids identical on {len(probes)} probe docs"
        else:
            why = "tiktoken conversion statically exact (no probe docs given)"
        why = "; ".join([*passed, why])
        # A plain loop, not encode_ordinary_batch: that maps one thread-pool future per doc
        # (~20 us each, measured 1.8x slower on 360-byte docs) inside the caller's own pool.
        # encode_ordinary releases the GIL, so the caller's threads already run in parallel.
        one = enc.encode_ordinary
        # encode_to_numpy with no special token allowed is encode_ordinary's BPE, returned as one
        # uint32 buffer instead of a list of Python ints: ~20% faster, and no GIL-held list
        # building between the threads (checked on the probe too)
        arr = functools.partial(enc.encode_to_numpy, disallowed_special=())
        if probes and any(a.tolist() != w for a, w in zip(map(arr, probes), want)):
            return cls("tiktoken", why + "; lists only (encode_to_numpy differs)", lambda texts: [one(t) for t in texts])
        return cls("tiktoken", why, lambda texts: [one(t) for t in texts], lambda texts: [arr(t) for t in texts])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        texts = list(texts)
        _check_texts(texts)
        return self._fn(texts)

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """The same ids as `encode_batch`, one uint32 array per document."""
        texts = list(texts)
        _check_texts(texts)
        return self._arrays(texts)
