"""`shardline explain`: where one document went, looked up in what the clean stage wrote.

Contract: `explain(doc_id)` says where a document went: kept (training or held out, which part and
row, its language), dropped in phase 2 (which reason, the document it repeats: the part's
selection), or dropped by a rule (which check, the value, the limit: the part's drop log,
`part-N.drops.arrow`, where the stage wrote every `Drop` it met, as datatrove's exclusion writer
does). The part is found by the clean plan (which raw file and span hold the id; a WARC record's
URL by the parts' ids and drop logs). It reads no raw file and runs no rule: the answer is the
stage's own, for every document, sampled or not. A part the current plan has not cleaned is "not
cleaned yet"; an id in no part's rows and no drop log was rejected by the reader (the part's
marker samples those) or is not there. Writes nothing.
"""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq

from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import drops_of
from shardline.data import compressed, frame
from shardline.data.clean.stage import dropped
from shardline.data.clean.stage.parts import part_meta, read_selection
from shardline.data.clean.stage.run import plan

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _stored_as(path: str, rel: str) -> bool:
    """Whether raw file `path` gives ids named `rel` (a compressed file's ids drop its suffix)."""
    return path == rel or any(path == rel + s for ss in compressed.SUFFIXES.values() for s in ss)


def _ids(path) -> list[str]:
    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


def _find(params: Params, layout: Layout, doc_id: str, source: str | None) -> frame.Part:
    """The clean part whose input holds doc_id, by the plan (a WARC record's URL: by its parts' ids)."""
    names = [s.name for s in params.sources]
    if source is not None and source not in names:
        raise BadInput(f"--source {source!r}: not in params.yaml (sources: {', '.join(names)})")
    parts = [p for p in plan(params, layout) if source in (None, p.work.source.name)]
    if _URL.match(doc_id):
        for part in (p for p in parts if p.work.source.format == "warc" and frame.finished(p) is not None):
            if doc_id in _ids(part.work.out) or doc_id in dropped.read_log(drops_of(part.work.out), ("id",))["id"]:
                return part
        raise BadInput(f"{doc_id!r}: no WARC source has a record with this URL")
    rel, _, n = doc_id.rpartition(":")
    if not rel or not n.isdigit():
        raise BadInput(f"{doc_id!r}: not a document id; ids are <file under data/raw/<source>/files>:<line or row>, "
                       "as in data/clean/<source>/dropped/*.jsonl")
    found: dict[str, tuple] = {}  # per source, the span that starts last before the line holds it
    for part in parts:
        for path, _sha, span in part.work.files:
            if _stored_as(path, rel) and span[2] <= int(n):
                src = part.work.source.name
                if src not in found or span[2] > found[src][1][2]:
                    found[src] = (part, span)
    if not found:
        raise BadInput(f"{doc_id!r}: no source has a raw file {rel!r} (looked in "
                       f"{', '.join(layout.rel(layout.raw_files(s)) for s in names)})")
    if len(found) > 1:
        raise BadInput(f"{doc_id!r}: sources {', '.join(found)} both have {rel!r}; pass --source")
    return next(iter(found.values()))[0]


def explain(params: Params, layout: Layout, doc_id: str, source: str | None = None) -> dict:
    """Where a document went, as data (the CLI prints it)."""
    part = _find(params, layout, doc_id, source)
    out: dict = {"id": doc_id, "source": part.work.source.name, "part": part.name}
    if frame.finished(part) is None:
        return {**out, "verdict": "not cleaned yet",
                "detail": "the clean stage has not run on its part with today's rules: run 'dvc repro clean'"}
    ids = _ids(part.work.out)
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
                    of = pq.read_table(layout.clean_part(of_part), columns=["id"]).column("id")[of_row].as_py()
                    return {**out, "verdict": "dropped", "rule": reason, "of": of}
        return {**out, "verdict": "kept", "side": "val" if row in set(sel["heldout"]) else "train"}
    log = dropped.read_log(drops_of(part.work.out), ("id", "rule", "value", "limit", "detail"))
    if doc_id in log["id"]:
        i = log["id"].index(doc_id)
        return {**out, "verdict": "dropped", "rule": log["rule"][i], "value": json.loads(log["value"][i]),
                "limit": json.loads(log["limit"][i]), **({"detail": log["detail"][i]} if log["detail"][i] else {})}
    bad = [s for s in (part_meta(part.work.out) or {}).get("stats", {}).get("samples", []) if s.startswith(f"{doc_id}:")]
    why = f" (the reader rejected it: {bad[0][len(doc_id) + 2:]})" if bad else \
        " (a record the reader rejected, or a line past the file's end: stats.json counts the rejected)"
    raise BadInput(f"{doc_id!r}: no such record in {part.name}{why}")


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
