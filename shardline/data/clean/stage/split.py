"""The held-out split: which documents of a source are held out for evaluation.

Contract:
- Every kept document gets `u = uint64(blake2b(source NUL digest, key=KEY))`, a keyed hash of its
  source and its content: `digest`, the 16-byte BLAKE2b of its cleaned text (the parquet's `hash`
  column, the one exact dedup compares). So a document's side does not depend on how its corpus
  is packaged: one file or many, any name, any compression, local, S3, `hf://` or WARC. A
  document is held out iff u is below its source's threshold. (Until CODE_VERSION 5 of the clean
  stage u hashed the document's `<file>:<line>` id: re-cutting or renaming a corpus moved
  documents between the sides. A project made before it gets a new split once, as its clean
  parts are redone.)
- The threshold is `eval.fraction` of the hash space, so a document's side is a function of its
  source and text alone, unless a clamp binds: with fewer than `eval.min_docs` documents below
  it, the `min_docs` lowest hashes are held out; with more than `eval.max_docs`, the `max_docs`
  lowest; the minimum never takes more than half of a source.
- So adding files or documents never moves a training document to the held-out side (its rank
  among the hashes only grows); a clamp can only move a held-out document to training (the
  minimum relaxing as the source grows, or a new lower hash displacing one under the maximum).
  A model trained on an earlier data version therefore never finds its training documents in a
  later held-out set. Exceptions: a source of fewer than 2 x min_docs documents (the half-cap
  grows with it); removing documents; a rule change (a clamp may then promote the next hash,
  and a rule that rewrites text, such as whitespace or c4's line removal, gives the documents
  it rewrites new hashes).
- Exact copies within a source share u, so they fall on one side by construction. The same text
  in two sources may not: the clean stage's dedup lets the held-out copy win, so that text
  changes side (counted as heldout_copies, now only ever across sources).
- The split is decided over the documents the cleaning rules keep, before dedup; the held-out
  documents get the same rules.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from shardline.core.config import Eval

KEY = b"shardline/heldout/v2"  # v1 hashed "<source> NUL <file>:<line>"
SAMPLE_KEY = b"shardline/heldout/v1"  # the dropped samples' choice (dropped.py): by id, as before
SPACE = 2**64
DECIDED_BY = {None: "eval.fraction", "min_docs": "eval.min_docs", "max_docs": "eval.max_docs",
              "half": "eval.min_docs, capped at half the source"}


def hash_doc(source: str, digest: bytes) -> int:
    """u of a document of `source` whose cleaned text's 16-byte BLAKE2b is `digest`."""
    return int.from_bytes(hashlib.blake2b(source.encode() + b"\0" + digest, key=KEY, digest_size=8).digest(), "little")


def hash_id(source: str, doc_id: str) -> int:
    """The id's hash, which chooses the dropped samples (dropped.py): every document has an id
    before the rules run, and hashing it costs nothing like hashing the whole text."""
    digest = hashlib.blake2b(f"{source}\0{doc_id}".encode(), key=SAMPLE_KEY, digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass(frozen=True)
class Threshold:
    """Documents with u < value are held out; `clamp` says which bound decided it, if any."""

    value: int
    held: int         # how many documents of the source that holds out
    clamp: str | None  # None (the fraction), "min_docs", "max_docs" or "half"

    def mask(self, u: np.ndarray) -> np.ndarray:
        return u < np.uint64(self.value) if self.value < SPACE else np.ones(len(u), dtype=bool)


def _smallest(us: list[np.ndarray], k: int) -> np.ndarray:
    """The k smallest values over the arrays, sorted (memory: about 2k values at a time)."""
    best = np.empty(0, dtype=np.uint64)
    for u in us:
        best = np.concatenate([best, u if len(u) <= k else np.partition(u, k - 1)[:k]])
        if len(best) > 2 * k:
            best = np.partition(best, k - 1)[:k]
    return np.sort(best)[:k]


def threshold(us: Iterable[np.ndarray], cfg: Eval) -> Threshold:
    """The threshold of one source from the u values of all its documents (one array per part)."""
    us = [np.asarray(u, dtype=np.uint64) for u in us]
    n = sum(len(u) for u in us)
    cut = min(int(cfg.fraction * SPACE), SPACE - 1)
    below = sum(int(np.count_nonzero(u < np.uint64(cut))) for u in us)
    k, clamp = below, None
    if k < cfg.min_docs:
        k, clamp = cfg.min_docs, "min_docs"
    if k > cfg.max_docs:
        k, clamp = cfg.max_docs, "max_docs"
    if clamp == "min_docs" and k > n // 2:  # the minimum never takes more than half a source
        k = max(below, n // 2)
        clamp = "half" if k > below else None
    if clamp is None:
        return Threshold(cut, below, None)
    if k == 0:
        return Threshold(0, 0, clamp)
    return Threshold(int(_smallest(us, k)[-1]) + 1, k, clamp)
