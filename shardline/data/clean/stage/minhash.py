"""Near-duplicate detection: MinHash signatures per clean part, LSH clusters over the corpus.

Contract (docs/architecture.md, "Curation"):
- Text is simplified before shingling, as datatrove does: ASCII lower case, ASCII punctuation
  deleted; words are runs of non-whitespace bytes. A shingle is `ngram` consecutive words of one
  document (a document with fewer words is one shingle; one with none gets no signature and is
  never clustered), hashed to 64 bits: each word by its first and last 8 bytes and its length
  (words over 16 bytes may collide in the middle bytes), then the words of the shingle mixed in order.
- Signatures are rensa's: `hash_bits` 64 gives C-MinHash 64-bit minima (FineWeb's precision),
  32 rensa's R-MinHash 32-bit minima (about 20x faster). `bands` x `rows` minima per document; a
  band's `rows` minima are folded into one 64-bit band key.
- `sign(texts)` gives each document's band keys. A part's file (`signature_file`) holds, per band,
  the keys sorted with their rows: what clustering reads, a key range at a time (memmap), so no
  step holds every signature of the corpus.
- `clusters(files, memory_mb)`: documents sharing any band key are one cluster (union-find over
  the pairs each band gives). Documents are numbered in global order (part index << 32 | row);
  a cluster's root is its lowest number: the first in params order, then the lowest stable id.
  Same inputs, same clusters, on any machine.
- `NearDedup` is its setting (the clean section's stage-wide `near_dedup`).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np

from pydantic import Field

from shardline.core import chaos, extras, fsio
from shardline.core.section_base import _Section

_U = np.uint64
_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True
_LOWER = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())
_PUNCT = string.punctuation.encode()
_SEP = b"\n"
_K = _U(0x9E3779B97F4A7C15)



class NearDedup(_Section):
    """MinHash LSH near-duplicate removal, FineWeb's settings by default. Two documents share a
    bucket (and so a cluster) with probability 1 - (1 - J**rows)**bands for Jaccard similarity J of
    their shingle sets: 50% at J = 0.72, 96% at J = 0.82, 0.3% at J = 0.5."""

    ngram: int = Field(5, ge=1)
    """Words per shingle."""
    bands: int = Field(14, ge=1)
    """LSH bands (buckets per document)."""
    rows: int = Field(8, ge=1)
    """Minima per band; bands x rows is the number of permutations (112)."""
    hash_bits: Literal[32, 64] = 64
    """64: rensa's C-MinHash with 64-bit minima (FineWeb's precision); 32: rensa's R-MinHash,
    32-bit minima, about 20x faster to sign (shingles are hashed to 64 bits either way)."""
    seed: int = 1
    """Seeds the permutations: a change re-signs every part."""
    memory_mb: float = Field(256.0, gt=0)
    """Clustering reads each band a key range at a time, sized to about this much memory."""


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit (wraps mod 2**64)."""
    x = x ^ (x >> _U(30))
    x = x * _U(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U(27))
    x = x * _U(0x94D049BB133111EB)
    return x ^ (x >> _U(31))


def _u64_at(buf: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The little-endian 8 bytes at each offset (buf is padded by 8 zero bytes)."""
    view = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
    return view[offsets]


def shingle_hashes(texts: Sequence[str], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """Every document's shingle hashes, flat, and offsets[i]:offsets[i+1] the ith document's."""
    parts = [t.encode("utf-8", "surrogatepass").translate(_LOWER, _PUNCT) for t in texts]
    blob = _SEP.join(parts) + bytes(8)
    buf = np.frombuffer(blob, dtype=np.uint8)
    n = len(blob) - 8
    space = _SPACE[buf[:n]]
    edge = np.diff(np.concatenate(([True], space, [True])).astype(np.int8))
    starts, ends = np.flatnonzero(edge == -1), np.flatnonzero(edge == 1)
    lengths = (ends - starts).astype(np.uint64)
    with np.errstate(over="ignore"):
        keep = np.where(lengths >= 8, _U(2**64 - 1), (_U(1) << (lengths * _U(8))) - _U(1))
        head = _u64_at(buf, starts) & keep
        tail = _u64_at(buf, np.maximum(ends - 8, starts)) & keep
        words = _mix(_mix(head ^ _K) ^ tail ^ (lengths * _K))
    first = np.zeros(len(texts) + 1, dtype=np.int64)  # each document's first byte in the blob
    first[1:] = np.cumsum([len(p) + 1 for p in parts])
    doc = np.searchsorted(first, starts, side="right") - 1
    counts = np.bincount(doc, minlength=len(texts))
    word_at = np.zeros(len(texts) + 1, dtype=np.int64)
    word_at[1:] = np.cumsum(counts)
    span = np.minimum(counts, ngram)  # a short document is one shingle of all its words
    n_sh = np.where(counts > 0, counts - span + 1, 0)
    offsets = np.zeros(len(texts) + 1, dtype=np.uint64)
    offsets[1:] = np.cumsum(n_sh)
    total = int(offsets[-1])
    owner = np.repeat(np.arange(len(texts)), n_sh)
    pos = np.arange(total) - offsets[:-1][owner].astype(np.int64) + word_at[:-1][owner]
    size = span[owner]
    h = np.zeros(total, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(ngram):
            inside = k < size
            h[inside] = _mix(h[inside] ^ words[pos[inside] + k] + _U(k))
    return h, offsets


def sign(texts: Sequence[str], cfg: NearDedup) -> tuple[np.ndarray, np.ndarray]:
    """(rows with a signature, their band keys [n, bands] uint64)."""
    rensa = extras.need("rensa", "clean.near_dedup")  # imported where it works: config and planning stay light

    h, offsets = shingle_hashes(texts, cfg.ngram)
    rows = np.flatnonzero(np.diff(offsets) > 0)
    perms = cfg.bands * cfg.rows
    if not len(rows):
        return rows, np.zeros((0, cfg.bands), dtype=np.uint64)
    if cfg.hash_bits == 64:
        sets = [h[int(offsets[r]):int(offsets[r + 1])] for r in rows]
        sig = np.asarray(rensa.CMinHash.digests64_from_token_hash_sets(sets, perms, cfg.seed), dtype=np.uint64)
    else:
        dense = np.concatenate(([0], np.cumsum(np.diff(offsets)[rows]))).astype(np.uint64)
        flat = np.concatenate([h[int(offsets[r]):int(offsets[r + 1])] for r in rows])
        m = rensa.RMinHash.digest_matrix_from_flat_token_hashes(flat, dense, perms, cfg.seed)
        sig = np.asarray(m.to_rows(), dtype=np.uint64)
    sig = sig.reshape(len(rows), cfg.bands, cfg.rows)
    keys = np.zeros((len(rows), cfg.bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(cfg.rows):
            keys = _mix(keys ^ sig[:, :, j] + _U(j))
    return rows, keys


def write_signatures(path: str | Path, rows: np.ndarray, keys: np.ndarray) -> None:
    """Per band, keys sorted (ties by row) and their rows: an array [2, bands, n] uint64."""
    order = np.lexsort((np.broadcast_to(rows[:, None], keys.shape).T, keys.T), axis=-1) if len(rows) else \
        np.zeros((keys.shape[1], 0), dtype=np.int64)
    out = np.empty((2, keys.shape[1], len(rows)), dtype=np.uint64)
    for b in range(keys.shape[1]):
        out[0, b] = keys[order[b], b]
        out[1, b] = rows[order[b]]
    with fsio.atomic_writer(path, point="minhash.write") as f:
        np.save(f, out)


def _band_chunks(files: Sequence[Path], band: int, chunks: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One band's (keys, global numbers), a key range at a time, each sorted by (key, number)."""
    edges = [2**64 * i // chunks for i in range(chunks + 1)]
    for lo, hi in zip(edges[:-1], edges[1:]):
        ks, gs = [], []
        for i, path in enumerate(files):
            a = np.load(path, mmap_mode="r")
            col = a[0, band]
            s = int(np.searchsorted(col, _U(lo)))
            e = len(col) if hi >= 2**64 else int(np.searchsorted(col, _U(hi)))
            ks.append(np.asarray(col[s:e]))
            gs.append(np.asarray(a[1, band, s:e]) | _U(i << 32))
        k, g = np.concatenate(ks), np.concatenate(gs)
        order = np.lexsort((g, k))
        yield k[order], g[order]


def _pairs(keys: np.ndarray, nums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first of each run of equal keys, every later member of that run)."""
    if len(keys) < 2:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    new_run = np.concatenate(([True], keys[1:] != keys[:-1]))
    run_first = np.maximum.accumulate(np.where(new_run, np.arange(len(keys)), 0))
    later = ~new_run
    return nums[run_first[later]], nums[later]


def _components(a: np.ndarray, b: np.ndarray) -> dict[int, int]:
    """Each number in a pair -> the lowest number connected to it (min-label propagation)."""
    if not len(a):
        return {}
    nodes, inv = np.unique(np.concatenate((a, b)), return_inverse=True)
    ia, ib = inv[:len(a)], inv[len(a):]
    label = np.arange(len(nodes))  # nodes are sorted: a lower label is a lower number
    while True:
        low = np.minimum(label[ia], label[ib])
        new = label.copy()
        np.minimum.at(new, ia, low)
        np.minimum.at(new, ib, low)
        new = new[new]  # pointer jumping: labels point at labels
        if np.array_equal(new, label):
            break
        label = new
    return dict(zip(nodes.tolist(), nodes[label].tolist()))


def clusters(files: Sequence[Path], bands: int, memory_mb: float) -> dict[int, int]:
    """Global number -> its cluster's root, for every document in a cluster of two or more."""
    entries = sum(np.load(f, mmap_mode="r").shape[2] for f in files)
    chunks = max(1, int(np.ceil(entries * 48 / (memory_mb * 2**20))))  # keys, numbers, sort order, pairs
    firsts, laters = [], []
    for band in range(bands):
        for keys, nums in _band_chunks(files, band, chunks):
            a, b = _pairs(keys, nums)
            firsts.append(a)
            laters.append(b)
        chaos.point("clean.cluster")
    a, b = np.concatenate(firsts or [np.zeros(0, np.uint64)]), np.concatenate(laters or [np.zeros(0, np.uint64)])
    if len(a):
        pairs = np.unique(np.stack((a, b), axis=1), axis=0)  # a pair found in several bands counts once
        a, b = pairs[:, 0], pairs[:, 1]
    return _components(a, b)


def jaccard(a: str, b: str, ngram: int) -> float:
    """Exact Jaccard similarity of two documents' shingle sets (for the dropped samples)."""
    ha, oa = shingle_hashes([a], ngram)
    hb, ob = shingle_hashes([b], ngram)
    sa, sb = set(ha.tolist()), set(hb.tolist())
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0
