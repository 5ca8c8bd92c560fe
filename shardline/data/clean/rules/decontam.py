"""Benchmark decontamination: drop a training document that shares a word n-gram with an
evaluation set.

Contract:
- `words(text)`: lowercase, then the maximal runs of `\\w` (re's Unicode word characters). A
  benchmark question copied onto a web page comes back with other capitals, quotes, dashes,
  markup and spacing; comparing words alone keeps those differences from hiding the copy.
- `ngram_hashes(text, n)`: one 64-bit hash per window of n consecutive words, in word order (so
  the i-th hash starts at word i). Deterministic across processes and machines (never the salted
  `hash()`): it is what an index on disk is compared with. The arithmetic is fixed (pinned in the
  tests); the words follow this Python's Unicode tables (`str.lower`, `\w`), so a new Unicode
  version may split a rare non-ASCII word differently: build the index with the run's Python.
  A text of fewer than n words has no n-gram and gives an empty array: it can neither
  contaminate nor be contaminated (an eval item that short is not looked for at all).
- `Index`: the sorted distinct n-gram hashes of an evaluation set, 8 bytes per distinct n-gram
  (measured: 10 MB of prose and code, 1.2 M distinct 13-grams, 9.6 MB), memory-mapped when
  loaded; lookups also build a bit filter of 2-4 bytes per n-gram in memory. Building holds
  every n-gram of the set at once (16 bytes each, before the duplicates go). `digest` (sha256 of the array and n) is
  what goes into the lineage. `save` writes `<path>` (.npy) and then `<path>.json` (n, count,
  digest); the pair is valid only once the JSON exists, and `load` checks the array against it.
- `DecontaminateRule(index_path, n)`: a cleaning rule; a document with any n-gram in the index is
  dropped with the first shared n-gram's words as the value and n as the limit. The index is
  loaded once per process (the rule itself holds only the path: it stays picklable).
  `Decontaminate` is its setting (the clean section's `decontaminate`), `DECONTAMINATE` its
  registry entry.

Hashing: a word's hash is a polynomial in its code points modulo 2^64 (odd base, so its prefix
sums can be divided back out: every word is hashed with a few numpy passes over the whole text,
not a Python call per word), finished with murmur3's fmix64; an n-gram's hash is a polynomial in
its words' hashes. A clean document is dropped by a collision with probability about
(its n-grams x the index's) / 2^64: ~5e-10 for 10^4 words against 10^6 eval n-grams.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pydantic import Field

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.layout import JSONL, PARQUET, index_meta_of
from shardline.core.remedies import remedy_for
from shardline.core.section_base import _Section
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

_U64 = np.uint64
HASH_VERSION = 1  # bump when ngram_hashes changes: indexes on disk are keyed by it (inputs.py)
_P = 0x9E3779B97F4A7C15  # word base: odd, so invertible modulo 2^64
_Q = 0xC2B2AE3D27D4EB4F  # n-gram base
_BATCH = 1 << 20  # characters hashed at once: bounds the prefix arrays (8 bytes a character each)
_SLOTS = 16  # filter bits per n-gram, at least (a power of two in all): 3-6% of misses still get searched
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@functools.cache
def _word_table() -> np.ndarray:
    """Per code point: is it `\\w` as re decides (built from re itself, once per process, ~0.05 s)."""
    every = "".join(map(chr, range(0x110000)))
    left = re.sub(r"\w", "\x00", every).encode("utf-32-le", "surrogatepass")
    table = np.frombuffer(left, np.uint32) == 0
    table[0] = False  # NUL was NUL before the substitution
    return table


def _powers(length: int, base: int = _P) -> tuple[np.ndarray, np.ndarray]:
    """base^i and base^-i for i < length (base odd: invertible modulo 2^64)."""
    out = []
    for b in (base, pow(base, -1, 1 << 64)):
        p = np.full(length, b, _U64)
        p[0] = 1
        out.append(np.cumprod(p))  # wraps modulo 2^64, as wanted
    return out[0], out[1]


# powers of two only, a few sizes: one huge document must not stay pinned in every worker
_cached_powers = functools.lru_cache(maxsize=16)(_powers)


def _fmix(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser, in place: a word's polynomial has weak low bits (they depend on
    the low bits of its code points only); after this every bit depends on every bit."""
    x ^= x >> _U64(33)
    x *= _U64(0xFF51AFD7ED558CCD)
    x ^= x >> _U64(33)
    x *= _U64(0xC4CEB9FE1A85EC53)
    x ^= x >> _U64(33)
    return x


def _codes(low: str) -> np.ndarray:
    if low.isascii():  # a quarter of the memory traffic of UTF-32
        return np.frombuffer(low.encode("ascii"), np.uint8)
    return np.frombuffer(low.encode("utf-32-le", "surrogatepass"), np.uint32)


def _word_hashes(text: str) -> np.ndarray:
    codes = _codes(text.lower())
    inword = np.zeros(len(codes) + 2, bool)  # padded: every word has a start edge and an end edge
    # into the padding: 2x np.diff(prepend, append); 'clip' (never needed: code points < 0x110000)
    # spares the buffered copy that 'raise' makes when out is given
    np.take(_word_table(), codes, out=inword[1:-1], mode="clip")
    edges = np.flatnonzero(inword[1:] != inword[:-1])
    starts, ends = edges[0::2], edges[1::2]
    out = np.empty(len(starts), _U64)
    a = 0
    while a < len(starts):  # batches of whole words (one batch unless the text is over _BATCH)
        b = len(starts) if ends[-1] - starts[a] <= _BATCH else \
            max(int(np.searchsorted(ends, starts[a] + _BATCH, "right")), a + 1)
        lo, hi = int(starts[a]), int(ends[b - 1])
        size = hi - lo
        pw, inv = _cached_powers(1 << size.bit_length()) if size <= _BATCH else _powers(size)  # one long word
        prefix = np.zeros(size + 1, _U64)  # prefix[i]: sum of code[j] * P^j for j < i
        np.cumsum(codes[lo:hi] * pw[:size], out=prefix[1:])
        s, e = starts[a:b] - lo, ends[a:b] - lo
        out[a:b] = (prefix[e] - prefix[s]) * inv[s]  # / P^start: the same word, the same hash, anywhere
        a = b
    return _fmix(out)


def ngram_hashes(text: str, n: int) -> np.ndarray:
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    with np.errstate(over="ignore"):
        w = _word_hashes(text)
        m = len(w) - n + 1
        if m <= 0:
            return np.empty(0, _U64)
        # g_i = sum_k w[i+k] Q^(n-1-k), from one prefix sum of w_t Q^-t: Q is odd, so Q^-t exists
        # modulo 2^64 and the windows come out exact, in 5 passes instead of 2n
        pw, inv = _cached_powers(1 << (len(w) + n).bit_length(), _Q)
        prefix = np.zeros(len(w) + 1, _U64)
        np.cumsum(w * inv[:len(w)], out=prefix[1:])
        return (prefix[n:] - prefix[:m]) * pw[n - 1:n - 1 + m]


def _texts(path: Path, field: str):
    """The evaluation texts of one .jsonl or .parquet file."""
    if not path.is_file():
        raise BadInput(f"{path}: evaluation set not found; check the path (or fetch the benchmark first)")
    if path.suffix == JSONL:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue  # a blank line (often the last) holds no document
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path}:{lineno}: not valid JSON ({e.msg}); fix or remove that line "
                                   "of the evaluation set") from None
                if not isinstance(record, dict) or field not in record:
                    have = sorted(record) if isinstance(record, dict) else type(record).__name__
                    raise BadInput(f"{path}:{lineno}: no text field {field!r} (found: {have}); name the "
                                   "field that holds the text (text_field)")
                if not isinstance(record[field], str):
                    raise BadInput(f"{path}:{lineno}: {field!r} is {record[field]!r:.40}, not text; fix or "
                                   "remove that line")
                yield record[field]
    elif path.suffix == PARQUET:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises several types for a file that is not parquet
            raise BadInput(f"{path}: not a readable parquet file ({e}); re-create it") from None
        names = pf.schema_arrow.names
        if field not in names:
            raise BadInput(f"{path}: no column {field!r} (columns: {names}); name the column that holds "
                           "the text (text_field)")
        row = 0
        for batch in pf.iter_batches(columns=[field]):
            for text in batch.column(0).to_pylist():
                row += 1
                if not isinstance(text, str):
                    raise BadInput(f"{path}: row {row}: {field!r} is {text!r:.40}, not text; drop that row")
                yield text
    else:
        raise BadInput(f"{path}: an evaluation set must be .jsonl or .parquet; convert it")


class Index:
    """The distinct n-gram hashes of an evaluation set, sorted; see the module docstring."""

    def __init__(self, hashes: np.ndarray, n: int):
        self.hashes, self.n = hashes, n

    @classmethod
    def build(cls, paths: list[Path], n: int, text_field: str = "text") -> "Index":
        every = np.sort(np.concatenate([np.empty(0, _U64)] + [
            ngram_hashes(t, n) for p in map(Path, paths) for t in _texts(p, text_field)]))
        # not np.unique: on uint64 it is ~40x slower than a sort and a mask (numpy 2.4, measured)
        return cls(every[np.r_[True, every[1:] != every[:-1]]] if len(every) else every, n)

    def __len__(self) -> int:
        return len(self.hashes)

    @functools.cached_property
    def digest(self) -> str:
        h = hashlib.sha256(np.ascontiguousarray(self.hashes, "<u8").data)
        h.update(f"n={self.n}".encode())
        return h.hexdigest()

    def save(self, path: str | Path) -> None:
        path = Path(path)
        with fsio.atomic_writer(path) as f:
            np.save(f, np.ascontiguousarray(self.hashes, "<u8"))
        meta = {"n": self.n, "ngrams": len(self), "digest": self.digest}
        fsio.write_json(index_meta_of(path), meta)  # last: the commit

    @classmethod
    def load(cls, path: str | Path) -> "Index":
        path = Path(path)
        if not index_meta_of(path).exists():
            raise BadInput(f"{path}: no {index_meta_of(path).name} beside it (an unfinished save?); build the index "
                           "again")
        meta = fsio.read_record(index_meta_of(path), remedy_for(path), keys={"n": int, "digest": str})
        # a plain array on the mapped pages: each operation on a np.memmap pays for its subclass
        index = cls(np.asarray(np.load(path, mmap_mode="r")), int(meta["n"]))
        if index.hashes.dtype != np.dtype("<u8") or index.hashes.ndim != 1 or index.digest != meta["digest"]:
            raise BadInput(f"{path}: does not match {index_meta_of(path).name} (digest {meta['digest'][:12]}…, got "
                           f"{index.digest[:12]}…); build the index again")
        return index

    @functools.cached_property
    def _filter(self) -> tuple[np.ndarray, np.uint64]:
        """A one-hash bit filter on the top bits: a binary search per n-gram costs ~20 cache misses
        in an index past the caches; the filter sends only ~1/_SLOTS of misses there."""
        bits = max(int(len(self) * _SLOTS - 1).bit_length(), 3)
        slots = self.hashes >> _U64(64 - bits)  # sorted, as the hashes are
        byte = slots >> _U64(3)
        first = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])  # each byte's first slot
        bit = np.left_shift(np.uint8(1), (slots & _U64(7)).astype(np.uint8))
        packed = np.zeros(1 << (bits - 3), np.uint8)
        packed[byte[first]] = np.bitwise_or.reduceat(bit, first)
        return packed, _U64(64 - bits)

    def first_hit(self, text: str) -> int | None:
        """The word position of the first n-gram of `text` that is in the index, or None."""
        if not len(self):
            return None
        h = ngram_hashes(text, self.n)
        packed, shift = self._filter
        slot = h >> shift
        maybe = np.flatnonzero((packed[slot >> _U64(3)] >> (slot & _U64(7)).astype(np.uint8)) & 1)
        if not len(maybe):
            return None
        order = np.argsort(h[maybe])  # sorted needles: numpy's search starts each from the last
        q = h[maybe][order]
        at = np.minimum(np.searchsorted(self.hashes, q), len(self) - 1)
        found = maybe[order][self.hashes[at] == q]
        return int(found.min()) if len(found) else None


@functools.cache
def _loaded(path: str) -> Index:
    return Index.load(path)  # once per process: a rebuilt index needs a new run (its digest changes)


class Decontaminate(_Section):
    """Drop training documents that share a word n-gram with an evaluation set (lowercased words:
    case and punctuation do not hide a copy). Held-out documents are judged too."""

    paths: tuple[str, ...] = Field(min_length=1)
    """Evaluation sets: local .jsonl or .parquet files (relative to the project)."""
    ngram: int = Field(13, ge=1)
    """Words per n-gram (13, as GPT-3's decontamination)."""
    text_field: str = "text"
    """The JSON field or parquet column holding each evaluation document's text."""


@dataclass(frozen=True)
class DecontaminateRule:
    index_path: str
    n: int
    name = "decontaminate"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        index = _loaded(self.index_path)
        if index.n != self.n:
            raise BadInput(f"{self.index_path}: built for {index.n}-grams, the rule asks for {self.n}-grams; "
                           "build the index with the same n")
        at = index.first_hit(text)
        if at is None:
            return text
        gram = " ".join(words(text)[at:at + self.n])[:200]
        return Drop(self.name, gram, self.n, f"at word {at}")


DECONTAMINATE = RuleEntry(
    "decontaminate", Decontaminate | None,
    Field(None, description="Benchmark decontamination: `{paths: [eval.jsonl, ...], ngram: 13}`. The evaluation sets' "
          "content hash is part of the rules' key (and the lineage): a changed set is a new data version."),
    lambda v, files: DecontaminateRule(files.index, v.ngram) if v is not None and files and files.index else None)
