"""`shardline explain`: where one document went.

Contract: `explain(doc_id)` says where a document went: kept (training or held out, which part
and row, its language), dropped in phase 2 (which reason, the document it repeats), or dropped by
a rule (the part's rules are run again on the raw record, through `rules.apply` as the stage
runs them: which check, the value, the limit). It reads what the clean stage wrote (its plan,
parts and selections) and never writes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq

from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.data import compressed, frame, readers
from shardline.data.clean import rules
from shardline.data.clean.stage import plan, read_selection
from shardline.data.clean.verdict import Drop


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _stored_as(path: str, rel: str) -> bool:
    """Whether raw file `path` gives ids named `rel` (a compressed file's ids drop its suffix)."""
    return path == rel or any(path == rel + s for ss in compressed.SUFFIXES.values() for s in ss)


def _find_url(params: Params, layout: Layout, url: str, source: str | None):
    """(source, part, path, span) of the WARC record whose id is `url`: among a part's kept
    documents, else by reading the raw files again (a record a rule dropped)."""
    warc = [p for p in plan(params, layout) if p.work.source.format == "warc" and source in (None, p.work.source.name)]
    for part in warc:
        if frame.finished(part) is not None and url in set(pq.read_table(part.work.out, columns=["id"])
                                                          .column("id").to_pylist()):
            path, _sha, span = part.work.files[0]
            return part.work.source.name, part, path, span
    for part in warc:
        for path, _sha, span in part.work.files:
            for rid, _ in readers.read(Path(part.work.raw_dir, path), path, part.work.source, readers.ReadStats()):
                if rid == url:
                    return part.work.source.name, part, path, span
    raise BadInput(f"{url!r}: no WARC source has a record with this URL")


def _find_raw(params: Params, layout: Layout, doc_id: str, source: str | None):
    """(source, part, relpath, span) whose raw file holds doc_id, by the clean plan."""
    if _URL.match(doc_id):  # a WARC record's id
        return _find_url(params, layout, doc_id, source)
    rel, _, n = doc_id.rpartition(":")
    if not rel or not n.isdigit():
        raise BadInput(f"{doc_id!r}: not a document id; ids are <file under data/raw/<source>/files>:<line or row>, "
                       "as in data/clean/<source>/dropped/*.jsonl")
    line = int(n)
    names = [s.name for s in params.sources]
    if source is not None and source not in names:
        raise BadInput(f"--source {source!r}: not in params.yaml (sources: {', '.join(names)})")
    hits = []
    for part in plan(params, layout):
        if source not in (None, part.work.source.name):
            continue
        for path, _sha, span in part.work.files:
            if _stored_as(path, rel) and span[2] <= line:
                hits.append((part.work.source.name, part, path, span))
    if not hits:
        raise BadInput(f"{doc_id!r}: no source has a raw file {rel!r} (looked in "
                       f"{', '.join(layout.rel(layout.raw_files(s)) for s in names)})")
    found = {}
    for src, part, path, span in hits:  # the span that starts last before the line holds it
        if src not in found or span[2] > found[src][3][2]:
            found[src] = (src, part, path, span)
    if len(found) > 1:
        raise BadInput(f"{doc_id!r}: sources {', '.join(found)} both have {rel!r}; pass --source")
    return next(iter(found.values()))


def explain(params: Params, layout: Layout, doc_id: str, source: str | None = None) -> dict:
    """Where a document went, as data (the CLI prints it)."""
    src, part, path, span = _find_raw(params, layout, doc_id, source)
    out: dict = {"id": doc_id, "source": src, "part": part.name}
    if frame.finished(part) is not None:
        ids = pq.read_table(part.work.out, columns=["id"]).column("id").to_pylist()
        if doc_id in ids:
            row = ids.index(doc_id)
            t = pq.read_table(part.work.out, columns=["lang", "lang_score"]).slice(row, 1).to_pylist()[0]
            # through read_selection: a clean stage killed before its selections were written (or one
            # left from another run) is a line saying to re-run it, not a missing-file traceback
            sel = read_selection(part.work.out)
            out.update(row=row, lang=t["lang"], lang_score=t["lang_score"])
            for reason, entries in sel.get("why", {}).items():
                for r, of_part, of_row in entries:
                    if r == row:
                        of = pq.read_table(layout.clean_part(of_part), columns=["id"]) \
                            .column("id")[of_row].as_py()
                        return {**out, "verdict": "dropped", "rule": reason, "of": of}
            side = "val" if row in set(sel["heldout"]) else "train"
            return {**out, "verdict": "kept", "side": side}
    stats = readers.ReadStats()
    w = part.work
    for doc in readers.documents(Path(w.raw_dir, path), path, w.source, stats, readers.Span(*span)):
        if doc.id == doc_id:
            result = rules.apply(w.chain(), doc, {})  # the decision the clean stage took
            if isinstance(result, Drop):
                return {**out, "verdict": "dropped", "rule": result.rule, "value": result.value,
                        "limit": result.limit, **({"detail": result.detail} if result.detail else {})}
            return {**out, "verdict": "not cleaned yet",
                    "detail": "the current rules keep it, but the clean stage has not run on it: run 'dvc repro clean'"}
    why = f" (unreadable: {stats.samples[0]})" if stats.samples else ""
    raise BadInput(f"{doc_id!r}: no such record in {layout.rel(Path(w.raw_dir))}/{path}{why}")


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

