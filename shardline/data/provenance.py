"""Where a block of a source's token stream came from: the documents it holds, and which of their tokens.

Contract: `Stream(layout, source, side)` maps a source's token stream (its token parts in index
order, each document's ids then EOS, BOS first when the line puts one; what the shard stage cuts
into blocks of seq_len + 1) back to documents, from what the line wrote and nothing else: the
token index (each part's tokens), the token parts themselves (a document ends at its EOS) and
each clean part's ids of that side (its selection says which rows; raw data is never read).
`pieces(start, count)` lists the (document id, [first, end) token range within that document,
the document's length in tokens) that tokens [start, start + count) cover, in order: the ranges
concatenated are exactly those tokens. A token part whose documents do not match its clean part's
(a stage re-run without the other) is one BadInput naming both and the remedy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardline.core import shardformat
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.data.clean.stage import parts as clean


@dataclass(frozen=True)
class Piece:
    """The tokens [first, end) of document `doc` (of `length` tokens, BOS and EOS included)."""

    doc: str
    first: int
    end: int
    length: int

    def to_json(self) -> dict:
        return {"id": self.doc, "tokens": [self.first, self.end], "of": self.length}


class Stream:
    """One side of one source's token stream, read back to its documents (parts loaded when first needed)."""

    def __init__(self, layout: Layout, source: str, side: str = "train"):
        self.layout, self.source, self.side = layout, source, side
        self.dir = layout.tokens_of(source, side)
        self.index = shardformat.read_index(self.dir, "; run the tokenize stage first (dvc repro tokenize)",
                                            show=layout.rel)
        self.dtype = shardformat.DTYPES[self.index["dtype"]]
        self.eos = self.index["eos_id"]
        self.starts = np.concatenate([[0], np.cumsum([p["tokens"] for p in self.index["parts"]], dtype=np.int64)])
        self._parts: dict[int, tuple[np.ndarray, np.ndarray, list[str]]] = {}

    def _part(self, i: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Part i: its tokens, the position of each document's EOS, the documents' ids."""
        if i not in self._parts:
            entry = self.index["parts"][i]
            tokens = np.fromfile(self.dir / entry["file"], dtype=self.dtype)
            ends = np.flatnonzero(tokens == self.eos)
            src = self.layout.clean_part(f"{self.source}/{Path(entry['file']).stem}")
            ids = [d for batch in clean.documents(src, self.side, column="id") for d in batch]
            if len(ids) != len(ends) or len(tokens) != entry["tokens"]:
                raise BadInput(f"{self.layout.rel(self.dir / entry['file'])}: {len(ends)} documents in "
                               f"{len(tokens)} tokens, but {self.layout.rel(src)} has {len(ids)} on this side and "
                               f"the index says {entry['tokens']} tokens: the tokenize stage did not run after "
                               "the clean stage; re-run 'dvc repro tokenize'")
            self._parts[i] = (tokens, ends, ids)
        return self._parts[i]

    def pieces(self, start: int, count: int) -> list[Piece]:
        out: list[Piece] = []
        end = start + count
        if start < 0 or end > self.starts[-1]:
            raise BadInput(f"{self.layout.rel(self.dir)}: tokens [{start}, {end}) are outside its "
                           f"{int(self.starts[-1]):,} tokens; the shards were not cut from these token parts "
                           "(re-run 'dvc repro shard')")
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < end:
            _, ends, ids = self._part(i)
            a, b = start - int(self.starts[i]), min(end, int(self.starts[i + 1])) - int(self.starts[i])
            first_doc = int(np.searchsorted(ends, a))  # the first document whose EOS is at or after a
            for j in range(first_doc, int(np.searchsorted(ends, b - 1)) + 1):
                lo = int(ends[j - 1]) + 1 if j else 0
                hi = int(ends[j]) + 1
                out.append(Piece(ids[j], max(a, lo) - lo, min(b, hi) - lo, hi - lo))
            start = int(self.starts[i]) + b
            i += 1
        return out
