"""Benchmark decontamination: drop a training document that shares a word n-gram with an
evaluation set.

Contract (the n-gram hashes compared: kernels/ngrams.py):
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
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pydantic import Field

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.filenames import JSONL, PARQUET, index_meta_of
from shardline.core.remedies import remedy_for
from shardline.core.section_base import _Section
from shardline.data.clean.kernels.ngrams import ngram_hashes, words
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

_U64 = np.uint64
_SLOTS = 16  # filter bits per n-gram, at least (a power of two in all): 3-6% of misses still get searched


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
