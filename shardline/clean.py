"""clean stage: raw files -> data/clean/<source>/part-NNNNN.parquet (+ data/clean/stats.json).

Contract:
- A source's raw files (manifest order) are grouped into parts of about `clean.part_mb`; a
  bigger file is cut into spans at record boundaries (`readers.spans`), a part each.
  Phase 1 (parallel, per part): read records, run the rules (`shardline.rules`), write the
  part with columns id, text, hash. Phase 2 (sequential, cheap: hash column only): exact dedup
  in global order (sources in params order, parts, rows), first occurrence wins; a part is
  rewritten without its duplicates.
- Every part carries, in its parquet metadata, `key` = hash(input files' sha256, reading
  options, clean rules, code version) and `ctx` = the dedup context (hash of every part key up
  to and including its own) once phase 2 has processed it. A re-run skips a part whose key
  matches and whose ctx is unset or current; so after a kill only unfinished parts are redone,
  and a part deduped against a different prefix is rebuilt, never trusted.
- stats.json (written last) sums the per-part tallies: docs/bytes in and out, per rule docs
  and bytes dropped, dedup, bad records with `file:line` samples, invalid UTF-8 count. The
  stage fails with `BadInput` when a source's bad-record fraction exceeds max_bad_fraction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from . import chaos, download, fsio, readers, rules
from .config import Clean, Params, Source
from .errors import BadInput
from .layout import Layout
from .parallel import Mapper, thread_map

CODE_VERSION = 1  # bump when cleaning output changes for the same inputs and params
_META = b"shardline"
_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("hash", pa.binary(16))])

Log = Callable[[str], None]


@dataclass(frozen=True)
class Part:
    source: Source
    index: int
    files: tuple[tuple[str, str, readers.Span], ...]  # (relpath under files/, sha256, span)
    raw_dir: str
    out: str
    key: str
    ctx: str
    cfg: Clean  # the clean section (picklable: parts may run on process/Dask workers)

    @property
    def name(self) -> str:
        return f"{self.source.name}/part-{self.index:05d}"


def _group(source: Source, raw_dir: Path, files: list[dict], part_bytes: float) -> list[list[tuple]]:
    """Small files share a part; a big file is cut into spans of its own parts."""
    groups: list[list[tuple]] = [[]]
    size = 0
    for f in files:
        for span in readers.spans(raw_dir / f["path"], source, f["bytes"], part_bytes):
            if groups[-1] and size >= part_bytes:
                groups.append([])
                size = 0
            groups[-1].append((f["path"], f["sha256"], span))
            size += f["bytes"] if span.end < 0 else part_bytes
    return [g for g in groups if g]


def plan(params: Params, layout: Layout) -> list[Part]:
    """Every part of every source, in global (dedup) order, with keys and contexts."""
    rule_keys = {k: v for k, v in params.section("clean").items() if k != "max_bad_fraction"}
    parts, chain = [], hashlib.sha256()
    for source in params.sources:
        manifest = download.read_manifest(layout, source.name)
        reading = {k: getattr(source, k) for k in ("format", "text_field", "txt_unit")}
        raw_dir = download.source_dir(layout, source.name) / "files"
        for i, files in enumerate(_group(source, raw_dir, manifest["files"], params.clean.part_mb * 2**20)):
            key = fsio.stable_hash({"files": files, "reading": reading, "rules": rule_keys, "v": CODE_VERSION})
            chain.update(key.encode())
            parts.append(Part(source, i, tuple(files), str(raw_dir),
                              str(layout.clean / source.name / f"part-{i:05d}.parquet"), key,
                              chain.hexdigest(), params.clean))
    return parts


def _meta(path: str) -> dict | None:
    try:
        md = pq.read_schema(path).metadata or {}
        return json.loads(md[_META])
    except (OSError, KeyError, ValueError, pa.ArrowInvalid):
        return None


def _write(path: str, table: pa.Table, meta: dict) -> None:
    table = table.replace_schema_metadata({_META: json.dumps(meta, sort_keys=True)})
    with fsio.atomic_writer(path) as f:
        pq.write_table(table, f, compression="zstd")


def _fresh(part: Part) -> dict | None:
    meta = _meta(part.out) if Path(part.out).exists() else None
    return meta if meta and meta["key"] == part.key and meta["ctx"] in (None, part.ctx) else None


def clean_part(part: Part) -> dict:
    """Phase 1 for one part; returns its tallies. Skips work that is already on disk."""
    meta = _fresh(part)
    if meta:
        return {**meta["stats"], "skipped": True}
    chain = rules.build(part.cfg)
    rstats = readers.ReadStats()
    counts: dict[str, list[int]] = {}
    ids, texts, hashes = [], [], []
    docs_in = bytes_in = 0
    for rel, _sha, span in part.files:
        for doc_id, text in readers.read(Path(part.raw_dir, rel), rel, part.source, rstats, readers.Span(*span)):
            docs_in += 1
            bytes_in += len(text.encode())
            out = rules.apply(chain, text, counts)
            if out is not None:
                ids.append(doc_id)
                texts.append(out)
                hashes.append(hashlib.blake2b(out.encode(), digest_size=16).digest())
    stats = {"docs_in": docs_in, "bytes_in": bytes_in, "records": rstats.records, "bad": rstats.bad,
             "invalid_utf8": rstats.invalid_utf8, "samples": rstats.samples, "docs_kept": len(texts),
             "bytes_kept": sum(len(t.encode()) for t in texts),
             "rules": {k: {"docs": v[0], "bytes": v[1]} for k, v in counts.items()}}
    table = pa.table({"id": ids, "text": texts, "hash": hashes}, schema=_SCHEMA)
    _write(part.out, table, {"key": part.key, "ctx": None, "stats": stats, "dedup": {"docs": 0, "bytes": 0}})
    chaos.point("clean.part")
    return {**stats, "skipped": False}


def dedup(parts: list[Part], enabled: bool, log: Log) -> None:
    """Phase 2: drop exact duplicates in global order; marks every part with its ctx."""
    seen: set[bytes] = set()
    for part in parts:
        meta = _meta(part.out)
        if meta["ctx"] == part.ctx:
            seen.update(pq.read_table(part.out, columns=["hash"]).column(0).to_pylist())
            continue
        table = pq.read_table(part.out)
        keep, dropped = [], 0
        for h in table.column("hash").to_pylist():
            dup = enabled and h in seen
            keep.append(not dup)
            dropped += dup
            seen.add(h)
        if dropped:
            texts = table.column("text").to_pylist()
            nbytes = sum(len(t.encode()) for t, k in zip(texts, keep) if not k)
            table = table.filter(pa.array(keep))
        else:
            nbytes = 0
        meta.update(ctx=part.ctx, dedup={"docs": dropped, "bytes": nbytes})
        _write(part.out, table.select(["id", "text", "hash"]), meta)
        chaos.point("clean.dedup")
        if dropped:
            log(f"clean: {part.name}: {dropped} exact duplicate(s) dropped")


def _summarise(parts: list[Part], params: Params, layout: Layout) -> dict:
    out: dict = {"rules_order": rules.names(params.clean), "sources": {}}
    for part in parts:
        meta = _meta(part.out)
        st = meta["stats"]
        s = out["sources"].setdefault(part.source.name, {
            "parts": 0, "docs_in": 0, "bytes_in": 0, "records": 0, "bad": 0, "invalid_utf8": 0,
            "docs_out": 0, "bytes_out": 0, "samples": [], "rules": {}, "dedup": {"docs": 0, "bytes": 0}})
        s["parts"] += 1
        for k in ("docs_in", "bytes_in", "records", "bad", "invalid_utf8"):
            s[k] += st[k]
        s["samples"] = (s["samples"] + st["samples"])[:20]
        for name, c in st["rules"].items():
            r = s["rules"].setdefault(name, {"docs": 0, "bytes": 0})
            r["docs"] += c["docs"]
            r["bytes"] += c["bytes"]
        for k in ("docs", "bytes"):
            s["dedup"][k] += meta["dedup"][k]
        s["docs_out"] += st["docs_kept"] - meta["dedup"]["docs"]
        s["bytes_out"] += st["bytes_kept"] - meta["dedup"]["bytes"]
    totals = {k: sum(s[k] for s in out["sources"].values()) for k in ("docs_in", "docs_out", "bytes_in", "bytes_out", "bad")}
    out["totals"] = totals
    return out


def check_bad_fraction(summary: dict, params: Params, layout: Layout) -> None:
    limit = params.clean.max_bad_fraction
    for name, s in summary["sources"].items():
        if s["records"] and s["bad"] / s["records"] > limit:
            samples = "\n  ".join(s["samples"])
            raise BadInput(f"clean: source {name!r}: {s['bad']} of {s['records']} records unreadable "
                           f"({s['bad'] / s['records']:.1%} > clean.max_bad_fraction {limit:.1%}) in "
                           f"{layout.rel(layout.raw / name / 'files')}; first ones:\n  {samples}\n"
                           "Fix the input (or sources[].text_field / format), or raise clean.max_bad_fraction.")


def run(params: Params, layout: Layout, log: Log = print, mapper: Mapper = thread_map) -> dict:
    layout.clean.mkdir(parents=True, exist_ok=True)
    fsio.remove_temps(layout.clean)
    parts = plan(params, layout)
    results = mapper(clean_part, parts)
    skipped = sum(r["skipped"] for r in results)
    log(f"clean: {len(parts)} part(s), {skipped} already done, {len(parts) - skipped} cleaned")
    summary = _summarise(parts, params, layout)  # before dedup: bad records are judged on input
    check_bad_fraction(summary, params, layout)
    dedup(parts, params.clean.dedup, log)
    fsio.prune(layout.clean, {Path(p.out) for p in parts} | {layout.clean / "stats.json"})
    summary = _summarise(parts, params, layout)
    fsio.write_json(layout.clean / "stats.json", summary)
    t = summary["totals"]
    log(f"clean: kept {t['docs_out']}/{t['docs_in']} docs, {t['bytes_out'] / 1e6:.1f}/{t['bytes_in'] / 1e6:.1f} MB")
    return summary


def read_texts(path: str | Path, batch_size: int = 1024):
    """Stream a clean part's texts in batches (the tokenize stage's reader)."""
    pf = pq.ParquetFile(path)
    for batch in pf.iter_batches(columns=["text"], batch_size=batch_size):
        yield batch.column(0).to_pylist()
