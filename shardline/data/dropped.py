"""What cleaning removed, and why: the dropped samples and `shardline explain`.

Contract:
- data/clean/<source>/dropped/<rule>.jsonl: per source and rule (a check such as
  gopher_quality.min_doc_words, or a phase-2 reason: dedup, near_dedup, heldout_copies,
  heldout_near_copies), at most `clean.drop_samples` rows, the documents with the lowest keyed
  id hash (`split.hash_id`): a uniform sample that does not depend on how the corpus was cut into
  parts. A row: {id, value, limit, detail?, head} (what the rule measured, its setting, the first
  200 characters; a near-duplicate's value is the exact Jaccard similarity of its shingles with the
  document it repeats, its limit the LSH's 50% point). Rewritten only when it changes.
- `explain(doc_id)` says where a document went: kept (training or held out, which part and row,
  its language), dropped in phase 2 (which reason, the document it repeats), or dropped by a rule
  (the rules are run again on the raw record: which check, the value, the limit).
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq

from shardline.core import fsio
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.data import frame, minhash, readers, rules, select

HEAD_CHARS = 200  # of a dropped document, in its sample
FIELDS = ("id", "value", "limit", "detail", "head")  # a sample row's, in this order


class Samples:
    """Per rule, the `k` dropped documents with the lowest keyed id hash `u`: a uniform sample,
    the same whatever the parts, so merging parts' samples gives the source's."""

    def __init__(self, k: int):
        self.k = k
        self.heaps: dict[str, list] = {}

    def offer(self, rule: str, u: int, row: dict) -> None:
        if not self.k:
            return
        heap = self.heaps.setdefault(rule, [])
        item = (-u, row["id"], row)  # a max-heap of the k lowest: the root is the first to go
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
        return {rule: [{**row, "u": -neg} for neg, _, row in sorted(heap, reverse=True)]
                for rule, heap in sorted(self.heaps.items())}


def folder(layout: Layout, source: str) -> Path:
    return layout.clean / source / "dropped"


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
        why = fsio.read_json(select.selection_path(part.work.out)).get("why", {})
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
            path = folder(layout, source) / f"{rule}.jsonl"
            data = "".join(json.dumps({k: row[k] for k in FIELDS if k in row}, ensure_ascii=False) + "\n"
                           for row in picked).encode()
            if not path.exists() or path.read_bytes() != data:
                fsio.write_bytes(path, data)
            out.add(path)
    return out


def _find_raw(params: Params, layout: Layout, doc_id: str, source: str | None):
    """(source, part, relpath, span) whose raw file holds doc_id, by the clean plan."""
    rel, _, n = doc_id.rpartition(":")
    if not rel or not n.isdigit():
        raise BadInput(f"{doc_id!r}: not a document id; ids are <file under data/raw/<source>/files>:<line or row>, "
                       "as in data/clean/<source>/dropped/*.jsonl")
    line = int(n)
    names = [s.name for s in params.sources]
    if source is not None and source not in names:
        raise BadInput(f"--source {source!r}: not in params.yaml (sources: {', '.join(names)})")
    from shardline.data.clean import plan  # the clean stage writes these files: it imports this module

    hits = []
    for part in plan(params, layout):
        if source not in (None, part.work.source.name):
            continue
        for path, _sha, span in part.work.files:
            if path == rel and span[2] <= line:
                hits.append((part.work.source.name, part, span))
    if not hits:
        raise BadInput(f"{doc_id!r}: no source has a raw file {rel!r} (looked in "
                       f"{', '.join(layout.rel(layout.raw_files(s)) for s in names)})")
    found = {}
    for src, part, span in hits:  # the span that starts last before the line holds it
        if src not in found or span[2] > found[src][2][2]:
            found[src] = (src, part, span)
    if len(found) > 1:
        raise BadInput(f"{doc_id!r}: sources {', '.join(found)} both have {rel!r}; pass --source")
    return next(iter(found.values()))


def explain(params: Params, layout: Layout, doc_id: str, source: str | None = None) -> dict:
    """Where a document went, as data (the CLI prints it)."""
    src, part, span = _find_raw(params, layout, doc_id, source)
    out: dict = {"id": doc_id, "source": src, "part": part.name}
    if frame.finished(part) is not None:
        ids = pq.read_table(part.work.out, columns=["id"]).column("id").to_pylist()
        if doc_id in ids:
            row = ids.index(doc_id)
            t = pq.read_table(part.work.out, columns=["lang", "lang_score"]).slice(row, 1).to_pylist()[0]
            sel = fsio.read_json(select.selection_path(part.work.out))
            out.update(row=row, lang=t["lang"], lang_score=t["lang_score"])
            for reason, entries in sel.get("why", {}).items():
                for r, of_part, of_row in entries:
                    if r == row:
                        of = pq.read_table(Path(part.work.out).parent.parent / f"{of_part}.parquet", columns=["id"]) \
                            .column("id")[of_row].as_py()
                        return {**out, "verdict": "dropped", "rule": reason, "of": of}
            side = "val" if row in set(sel["heldout"]) else "train"
            return {**out, "verdict": "kept", "side": side}
    cfg = params.clean_for(next(s for s in params.sources if s.name == src))
    stats = readers.ReadStats()
    w = part.work
    for rid, text in readers.read(Path(w.raw_dir, doc_id.rpartition(":")[0]), doc_id.rpartition(":")[0],
                                  w.source, stats, readers.Span(*span)):
        if rid == doc_id:
            result = rules.apply(rules.build(cfg), text, {}, {})
            if isinstance(result, rules.Drop):
                return {**out, "verdict": "dropped", "rule": result.rule, "value": result.value,
                        "limit": result.limit, **({"detail": result.detail} if result.detail else {})}
            return {**out, "verdict": "not cleaned yet",
                    "detail": "the current rules keep it, but the clean stage has not run on it: run 'dvc repro clean'"}
    why = f" (unreadable: {stats.samples[0]})" if stats.samples else ""
    raise BadInput(f"{doc_id!r}: no such record in {layout.rel(Path(w.raw_dir))}/{doc_id.rpartition(':')[0]}{why}")


def render(e: dict) -> str:
    where = f"{e['source']}, {e['part']}" + (f" row {e['row']}" if "row" in e else "")
    if e["verdict"] == "kept":
        lang = f"; language {e['lang']} ({e['lang_score']:.2f})" if e.get("lang") else ""
        return f"{e['id']}: kept for {'training' if e['side'] == 'train' else 'held-out evaluation'} ({where}){lang}"
    if e["verdict"] == "dropped" and "of" in e:
        return f"{e['id']}: dropped by {e['rule']}: it repeats {e['of']} ({where})"
    if e["verdict"] == "dropped":
        detail = f"; {e['detail']}" if e.get("detail") else ""
        return f"{e['id']}: dropped by {e['rule']}: measured {e['value']}, limit {e['limit']}{detail} ({where})"
    return f"{e['id']}: {e['detail']} ({where})"

