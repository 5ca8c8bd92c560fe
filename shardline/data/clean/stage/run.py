"""The clean stage: raw files -> data/clean/<source>/part-NNNNN.parquet + .split.json (+ data/clean/stats.json).

Contract:
- A source's raw files (manifest order) are grouped into parts of about `clean.part_mb`; a
  bigger file is cut into spans at record boundaries (`filespans.spans`), a part each.
- Phase 1 (per part, in the stage frame `shardline.data.frame`, on worker processes: the rules
  are Python that holds the GIL): read each record as a `Document`, run it through the source's
  rules (`Params.clean_for`, `rules.apply`: the one decision, which `shardline explain` asks
  again), write every document they keep to the part: columns id, text, hash
  (of the text), bytes (UTF-8 length), u (the split hash of source and content, `split.py`), lang and
  lang_score (what the language rule found; null without one). Its done-marker `part-NNNNN.json`
  holds `key` = hash(input files' sha256, reading options, the source's rules other than dedup
  and near_dedup, the source name, code version, the release of each plug-in rule it runs)
  and the part's tallies; `part-NNNNN.dropped.json`
  its sample of what the rules dropped (`dropped.py`). A re-run skips a part whose
  key matches, so after a kill only unfinished parts are redone. A part never changes once
  written: what other parts hold cannot invalidate it.
- Phase 2 (`select.py`): the held-out split, near-dedup (its own frame of signature
  parts) and exact dedup, one selection per part, then data/clean/split.json last (the
  thresholds, and each source's held-out fingerprint: `heldout_fingerprint`). The
  per-source dropped samples go to data/clean/<source>/dropped/<rule>.jsonl.
- `documents(part, side)` reads one side's texts; the tokenize stage reads nothing else. It
  refuses a selection whose part key or ctx is not the finished stage's (a clean stage killed
  halfway through its selections), naming the remedy.
- stats.json (written last, `tally.py`) sums the tallies: docs/bytes in and out, held out (and which clamp
  decided the split), per check docs and bytes dropped, dedup, near_dedup (and its clusters),
  training copies and near-copies of held-out documents, bad records with `file:line` samples,
  invalid UTF-8 count, and the damaged raw files it read past (`damaged`: one line each, also
  logged as a warning, `damage.py`). The stage fails with `BadInput` when a source's bad-record
  fraction exceeds max_bad_fraction.

Design: docs/architecture.md (The stage frame; Curation; Data contracts: Clean parts).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardline.core import fsio
from shardline.core.config import Params, Source
from shardline.core.layout import Layout
from shardline.core.filenames import (clean_marker_of, clean_part_name, dropped_sample_of, drops_of, index_meta_of,
                                      selection_of)
from shardline.core.parallel import Mapper, process_map
from shardline.core.progress import Sink
from shardline.data import compressed, download, frame, grouping, readers, staging
from shardline.data.clean.rules import registry as rules, ruleset
from shardline.data.clean.stage import damage, dropped, inputs, select, split, tally
from shardline.data.clean.stage.parts import documents, part_meta, read_selection, side_key  # noqa: F401 (the stage's readers)
from shardline.data.clean.stage.settings import Clean
from shardline.data.clean.verdict import Drop

CODE_VERSION = 6  # bump when cleaning output changes for the same inputs and params (5: u by content; 6: the drop log)
_BATCH = 2048  # documents per Arrow batch while a part is cleaned
_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("hash", pa.binary(16)), ("bytes", pa.int64()),
                     ("u", pa.uint64()), ("lang", pa.string()), ("lang_score", pa.float32())])
_WEB = _SCHEMA.append(pa.field("url", pa.string())).append(pa.field("date", pa.string()))  # format: warc

Log = Callable[[str], None]


@dataclass(frozen=True)
class Work:
    """What cleaning one part needs (picklable: parts run in worker processes or on a cluster)."""

    source: Source
    files: tuple[tuple[str, str, readers.Span], ...]  # (relpath under files/, sha256, span)
    raw_dir: str
    out: str
    cfg: Clean  # the clean section
    blocklist: tuple[str, str] | None = None  # clean.url_blocklist: (absolute path, sha256)
    index: str | None = None  # clean.decontaminate: the n-gram index's path

    def chain(self) -> list:
        """The part's rules, in order: what the stage runs each document through, and what
        `shardline explain` runs a dropped one through again."""
        return rules.build(self.cfg, inputs.Inputs(self.blocklist, self.index))


def plan(params: Params, layout: Layout, known: dict | None = None) -> list[frame.Part]:
    """Every part of every source, in global (dedup) order, with its key. `known`: the spans of
    compressed files found before (`shardline.data.grouping`; read from disk when not given)."""
    known = grouping.load_spans(layout) if known is None else known
    parts = []
    for source in params.sources:
        cfg = params.clean_for(source)
        rule_keys = cfg.model_dump(mode="json", exclude={"max_bad_fraction", "dedup", "near_dedup"})
        if any(rule_keys.get(k) is not None for k in rules.REFERENCED):  # their parts follow the reference they were made by
            rule_keys["reference"] = ruleset.REFERENCE
        plugged = {e.key: e.origin for e in rules.RULES if e.origin and rule_keys.get(e.key) not in (None, False)}
        if plugged:  # a plug-in rule's release: a new one cleans its parts again
            rule_keys["plugins"] = plugged
        given = inputs.resolve(cfg, layout)
        rule_keys.update(given.keys)  # the files' content decides, not where they lie
        manifest = download.read_manifest(layout, source.name)
        reading = {k: getattr(source, k) for k in ("format", "text_field", "txt_unit")}
        raw_dir = layout.raw_files(source.name)
        for i, group in enumerate(grouping.group(source, raw_dir, manifest["files"], params.clean.part_mb * 2**20,
                                                 known)):
            files = [(path, sha, span) for path, sha, span, _, _ in group]
            key = fsio.stable_hash({"files": files, "reading": reading, "rules": rule_keys, "v": CODE_VERSION,
                                    "source": source.name})  # the split hash is keyed by the source name
            name = clean_part_name(source.name, i)
            out = layout.clean_part(name)
            cut = [path for path, _, span, _, which in group if span.end >= 0 and which]  # decoded in order
            parts.append(frame.Part("clean", name, key, str(clean_marker_of(out)),
                                    sum(grouping.span_bytes(span, size) for _, _, span, size, _ in group),
                                    Work(source, tuple(files), str(raw_dir), str(out), cfg, given.blocklist,
                                         given.index),
                                    group=f"{source.name}/{cut[0]}" if cut else None))
    return parts


def rule_code(cfg: Clean) -> dict[str, str]:
    """Each rule a source runs, by the code that decides it: a plug-in's distribution and release, or
    this stage's code version (and the reference a rule follows)."""
    on = cfg.model_dump(mode="json", exclude={"max_bad_fraction", "drop_samples", "part_mb"})
    return {e.key: e.origin or f"shardline clean v{CODE_VERSION}" + (f", {ruleset.REFERENCE}" if e.reference else "")
            for e in rules.RULES if on.get(e.key) not in (None, False)}


def part_inputs(part: frame.Part) -> list[tuple[str, tuple[int, int] | None]]:
    """What cleaning a part reads (shardline.data.staging): its raw files (a plain file's span as
    its byte range: a compressed one is decoded from its start) and the rules' own files."""
    w: Work = part.work
    out: list[tuple[str, tuple[int, int] | None]] = []
    for rel, _sha, span in w.files:
        path = Path(w.raw_dir, rel)
        out.append((str(path), None if span[1] < 0 or compressed.codec(path) else (span[0], span[1])))
    if w.blocklist:
        out.append((w.blocklist[0], None))
    if w.index:
        out += [(w.index, None), (str(index_meta_of(w.index)), None)]
    return out


def clean_part(part: frame.Part) -> tuple[list[Path], dict]:
    """Phase 1 for one part: its parquet file, its dropped sample and tallies (the frame skips a
    part already done)."""
    w: Work = part.work
    chain = w.chain()
    schema = _WEB if w.source.format == "warc" else _SCHEMA
    rstats = readers.ReadStats()
    counts: dict[str, list[int]] = {name: [0, 0] for name in rules.names(w.cfg)}
    cols: dict[str, list] = {name: [] for name in schema.names}
    batches: list[pa.RecordBatch] = []
    samples, drops = dropped.Samples(w.cfg.drop_samples), dropped.Log()
    docs_in = bytes_in = kept = kept_bytes = 0
    damaged = []  # per raw file that gave bad records: the stage's warning lines (damage.py)
    for rel, _sha, span in w.files:
        fstats = readers.ReadStats()
        for doc in readers.documents(Path(w.raw_dir, rel), rel, w.source, fstats, readers.Span(*span)):
            docs_in += 1
            text = doc.text
            bytes_in += (size := len(text) if text.isascii() else len(text.encode()))  # isascii: a flag, O(1)
            out = rules.apply(chain, doc, counts, size)
            u = split.hash_id(w.source.name, doc.id)  # the dropped samples' choice: by id, cheap
            if isinstance(out, Drop):
                drops.add(doc.id, out.rule, out.value, out.limit, out.detail)
                if samples.wants(out.rule, u):  # most drops cannot enter their sample: no row made
                    samples.offer(out.rule, u, {"id": doc.id, "value": out.value, "limit": out.limit,
                                                **({"detail": out.detail} if out.detail else {}),
                                                "head": text[:dropped.HEAD_CHARS]})
                continue
            data = out.encode()
            meta = doc.metadata
            digest = hashlib.blake2b(data, digest_size=16).digest()
            row = {"id": doc.id, "text": out, "hash": digest, "bytes": len(data),
                   "u": split.hash_doc(w.source.name, digest),  # the split's: by content (split.py)
                   "lang": meta.get("language"), "lang_score": meta.get("language_score"),
                   "url": doc.url, "date": meta.get("date")}
            for name in schema.names:
                cols[name].append(row[name])
            kept += 1
            kept_bytes += len(data)
            if len(cols["id"]) == _BATCH:  # to Arrow as we go: Python strs cost 1-4 bytes a char
                batches.append(pa.RecordBatch.from_pydict(cols, schema=schema))
                cols = {k: [] for k in cols}
        rstats.add(fstats)
        if fstats.bad:
            damaged.append(damage.of(rel, fstats, Path(w.raw_dir, rel).stat().st_size))
    batches.append(pa.RecordBatch.from_pydict(cols, schema=schema))
    stats = {"docs_in": docs_in, "bytes_in": bytes_in, "records": rstats.records, "bad": rstats.bad,
             "invalid_utf8": rstats.invalid_utf8, "skipped": rstats.skipped, "samples": rstats.samples,
             "docs_kept": kept,
             "bytes_kept": kept_bytes, "rules": {k: {"docs": v[0], "bytes": v[1]} for k, v in counts.items()},
             **({"damaged": damaged} if damaged else {})}
    with fsio.atomic_writer(w.out, point="clean.write") as f:  # one row group, as one table: the same bytes
        pq.write_table(pa.Table.from_batches(batches, schema=schema), f, compression="zstd")
    fsio.write_json(dropped_sample_of(w.out), samples.result())
    drops.write(drops_of(w.out))
    return [Path(w.out), dropped_sample_of(w.out), drops_of(w.out)], stats


def heldout_fingerprint(parts: list[frame.Part]) -> dict:
    """One source's held-out set as one hash: the sha256 of its documents' content digests (the
    parquet's `hash`), in order, with their count. The same documents give the same fingerprint
    however the corpus was packaged (split.py keys the split by content too)."""
    h, n = hashlib.sha256(), 0
    for p in parts:  # read before split.json exists, so not through documents(), which checks against it
        rows = np.sort(np.asarray(fsio.read_json(selection_of(p.work.out))["heldout"], dtype=np.int64))
        if len(rows):
            digests = pq.read_table(p.work.out, columns=["hash"]).column(0).take(rows).to_pylist()
            h.update(b"".join(digests))
            n += len(digests)
    return {"sha256": h.hexdigest(), "docs": n}


def run(params: Params, layout: Layout, log: Log = print, mapper: Mapper = process_map,
        sink: Sink | None = None) -> dict:
    layout.clean.mkdir(parents=True, exist_ok=True)
    fsio.remove_temps(layout.clean)
    known: dict = {}
    parts = plan(params, layout, {**grouping.load_spans(layout), "new": known})
    spans = grouping.save_spans(layout, known)  # only the spans of today's files: what no plan needs goes
    indexes = {p for p in (inputs.build_index(params.clean_for(s), layout, log) for s in params.sources) if p}
    staged = staging.of(params, layout)
    t0 = time.perf_counter()
    markers, skipped = frame.run("clean", parts, clean_part, mapper, log, sink, staged, part_inputs)
    log(f"clean: {len(parts)} part(s), {skipped} already done, {len(parts) - skipped} cleaned in "
        f"{time.perf_counter() - t0:.2f}s")
    damaged = damage.collect(parts, markers, layout)
    for lines in damaged.values():
        for line in lines:
            log(f"warning: {line}")
    tally.check_bad_fraction(tally.summarise(parts, markers, params), params, layout)  # judged on input, before the split
    thresholds, near = select.select(parts, params, log, mapper, sink, staged)
    samples = dropped.write(parts, params, layout, dropped_sample_of)
    outs = [Path(p.work.out) for p in parts]
    frame.sweep(layout.clean, {f for o in outs for f in (o, clean_marker_of(o), selection_of(o), dropped_sample_of(o),
                                                         drops_of(o))}
                | select.signature_files(parts, params) | samples | {layout.clean_stats, layout.clean_split}
                | indexes | {index_meta_of(p) for p in indexes} | {spans})
    summary = tally.summarise(parts, markers, params, thresholds, near)
    for name, lines in damaged.items():
        summary["sources"][name]["damaged"] = lines  # the evidence card counts them
    given = {s.name: inputs.resolve(params.clean_for(s), layout).keys for s in params.sources}
    summary["rule_inputs"] = {name: keys for name, keys in given.items() if keys}  # content hashes: the lineage's
    summary["rule_code"] = {s.name: rule_code(params.clean_for(s)) for s in params.sources}  # `shardline diff` names a change
    fsio.write_json(layout.clean_stats, summary)
    fsio.write_json(layout.clean_split, {  # last: every selection on disk is this run's
        "ctx": select.context(parts, params), "settings": params.eval.split(),
        "thresholds": {n: {"below": t.value, "held": t.held, "decided_by": split.DECIDED_BY[t.clamp]}
                       for n, t in thresholds.items()},
        # what a checkpoint's lineage records, and `shardline eval` compares: which documents are held out
        "heldout": {s.name: heldout_fingerprint([p for p in parts if p.work.source.name == s.name])
                    for s in params.sources}})
    t = summary["totals"]
    log(f"clean: kept {t['docs_out']}/{t['docs_in']} docs for training ({t['bytes_out'] / 1e6:.1f}/"
        f"{t['bytes_in'] / 1e6:.1f} MB), {t['heldout_docs']} held out")
    return summary
