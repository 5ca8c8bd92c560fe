"""What cleaning removed, and why: every drop of a part, and the dropped samples (`shardline explain`: explain.py).

Contract:
- data/clean/<source>/part-N.drops.arrow: every document the part's rules dropped, in the order
  read, as datatrove's exclusion writer keeps them: id, rule (the check), value, limit, detail.
  Small (no text), so `shardline diff` compares two runs' drops document by document, and what a
  rule did is a lookup, never a recomputation.
- data/clean/<source>/dropped/<rule>.jsonl: per source and rule (a check such as
  gopher_quality.min_doc_words, or a phase-2 reason: dedup, near_dedup, heldout_copies,
  heldout_near_copies), at most `clean.drop_samples` rows, the documents with the lowest keyed
  id hash (`split.hash_id`): a uniform sample that does not depend on how the corpus was cut into
  parts. A row: {id, value, limit, detail?, head} (what the rule measured, its setting, the first
  200 characters; a near-duplicate's value is the exact Jaccard similarity of its shingles with the
  document it repeats, its limit the LSH's 50% point). Rewritten only when it changes.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.remedies import remedy_for
from shardline.core.config import Params
from shardline.core.layout import Layout
from shardline.core.filenames import selection_of
from shardline.data import frame
from shardline.data.clean.stage import minhash

HEAD_CHARS = 200  # of a dropped document, in its sample
FIELDS = ("id", "value", "limit", "detail", "head")  # a sample row's, in this order


# value and limit as JSON: most are numbers, but a rule may measure text (decontamination's n-gram)
LOG_SCHEMA = pa.schema([("id", pa.string()), ("rule", pa.dictionary(pa.int32(), pa.string())), ("value", pa.string()),
                        ("limit", pa.string()), ("detail", pa.string())])


class Log:
    """Every drop of one part, as the clean stage meets them."""

    def __init__(self):
        self.cols: dict[str, list] = {k: [] for k in LOG_SCHEMA.names}

    def add(self, doc_id: str, rule: str, value, limit, detail: str) -> None:
        for k, v in zip(LOG_SCHEMA.names, (doc_id, rule, json.dumps(value), json.dumps(limit), detail)):
            self.cols[k].append(v)

    def write(self, path: Path) -> None:
        with fsio.atomic_writer(path, point="clean.write") as f:
            feather.write_feather(pa.table(self.cols, schema=LOG_SCHEMA), f, compression="zstd")


def read_log(path: Path, columns: tuple[str, ...] = ("id", "rule")) -> dict[str, list]:
    """A part's drops, column by column; one that does not read is one line naming it and its rebuild."""
    try:
        t = feather.read_table(path, columns=list(columns))
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise BadInput(f"{path}: not a readable drop log ({str(e).splitlines()[0]}); {remedy_for(path)}") from None
    return {c: t.column(c).to_pylist() for c in columns}


class Samples:
    """Per rule, the `k` dropped documents with the lowest keyed id hash `u`: a uniform sample,
    the same whatever the parts, so merging parts' samples gives the source's."""

    def __init__(self, k: int):
        self.k = k
        self.heaps: dict[str, list] = {}

    def wants(self, rule: str, u: int) -> bool:
        """Whether a document of hash `u` dropped by `rule` may enter its sample (else its row
        need not be made)."""
        heap = self.heaps.get(rule)
        return bool(self.k) and (heap is None or len(heap) < self.k or -u >= heap[0][0])

    def offer(self, rule: str, u: int, row: dict) -> None:
        if not self.wants(rule, u):
            return
        heap = self.heaps.setdefault(rule, [])
        # a max-heap of the k lowest: the root is the first to go. Two documents may share an id
        # (a URL crawled twice): their content breaks the tie, so rows are never compared as dicts
        item = (-u, row["id"], json.dumps(row, sort_keys=True, default=str), row)
        if len(heap) < self.k:
            heapq.heappush(heap, item)
        elif item > heap[0]:
            heapq.heapreplace(heap, item)

    def merge(self, other: dict[str, list[dict]]) -> None:
        for rule, rows in other.items():
            for row in rows:
                self.offer(rule, row["u"], {k: v for k, v in row.items() if k != "u"})

    def result(self) -> dict[str, list[dict]]:
        """rule -> rows, lowest u first (each row carries its u)."""
        return {rule: [{**row, "u": -neg} for neg, _, _, row in sorted(heap, reverse=True)]
                for rule, heap in sorted(self.heaps.items())}


def _cells(parts: list[frame.Part], wanted: dict[tuple[str, str], set[int]]) -> dict[tuple[str, str, int], object]:
    """(part, column, row) -> value for the cells asked for: each part's column read once, and only
    those rows made Python objects."""
    by_name = {p.name: p for p in parts}
    out = {}
    for (part, column), rows in wanted.items():
        col = pq.read_table(by_name[part].work.out, columns=[column]).column(column)
        for r, v in zip(sorted(rows), col.take(sorted(rows)).to_pylist()):
            out[part, column, r] = v
    return out


def _phase2(parts: list[frame.Part], params: Params, samples: dict[str, Samples]) -> None:
    near = params.clean.near_dedup
    limit = round((1 / near.bands) ** (1 / near.rows), 4) if near else None
    chosen: dict[str, Samples] = {}
    for part in parts:
        why = fsio.read_json(selection_of(part.work.out)).get("why", {})
        if not why:
            continue
        u = pq.read_table(part.work.out, columns=["u"]).column("u").to_numpy()
        s = chosen.setdefault(part.work.source.name, Samples(params.clean.drop_samples))
        for reason, entries in why.items():
            for row, of_part, of_row in entries:
                s.offer(reason, int(u[row]), {"id": part.name, "row": row, "of": [of_part, of_row]})
    picks = [(source, reason, e) for source, s in chosen.items() for reason, es in s.result().items() for e in es]
    wanted: dict[tuple[str, str], set[int]] = {}
    for _, reason, e in picks:
        near_rule = "near" in reason
        for part, row, cols in ((e["id"], e["row"], ("id", "text")), (*e["of"], ("id", "text") if near_rule else ("id",))):
            for c in cols:
                wanted.setdefault((part, c), set()).add(row)
    cell = _cells(parts, wanted)
    for source, reason, e in picks:
        near_rule = "near" in reason
        text = cell[e["id"], "text", e["row"]]
        of = (*e["of"],)
        value = minhash.jaccard(text, cell[of[0], "text", of[1]], near.ngram) if near_rule else 1.0
        samples[source].offer(reason, e["u"], {
            "id": cell[e["id"], "id", e["row"]], "value": round(value, 4), "limit": limit if near_rule else 1.0,
            "detail": f"{'near-duplicate' if near_rule else 'exact copy'} of {cell[of[0], 'id', of[1]]}",
            "head": text[:HEAD_CHARS]})


def write(parts: list[frame.Part], params: Params, layout: Layout, sample_of: Callable[[str], Path]) -> set[Path]:
    """Write every source's dropped/<rule>.jsonl from the parts' samples (`sample_of(part file)`)
    and the selections; returns the files written or kept."""
    samples = {s.name: Samples(params.clean.drop_samples) for s in params.sources}
    for part in parts:
        samples[part.work.source.name].merge(fsio.read_json(sample_of(part.work.out)))
    _phase2(parts, params, samples)
    out = set()
    for source, s in samples.items():
        for rule, picked in s.result().items():
            path = layout.dropped_rule(source, rule)
            data = "".join(json.dumps({k: row[k] for k in FIELDS if k in row}, ensure_ascii=False) + "\n"
                           for row in picked).encode()
            if not path.exists() or path.read_bytes() != data:
                fsio.write_bytes(path, data)
            out.add(path)
    return out
