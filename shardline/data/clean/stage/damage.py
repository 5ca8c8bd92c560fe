"""Damage the clean stage read past, said out loud: one warning line per damaged raw file.

Contract:
- `of(rel, stats, size)` is what a part's marker records of one raw file that gave bad records
  (`stats`: that file's `ReadStats`): {file, bytes (the file's size),
  records, bad, first (the first bad record's `where: why`), cut ([byte, what] where damage ended
  the file, else null)}.
- `collect(parts, markers, layout)` merges those per file across parts (a big jsonl is cut into
  spans, a part each) and returns {source: [line, ...]}, in plan order, one line per damaged file.
  A line names the file as the user knows it (data/raw/<source>/files/...), the byte (a cut) or
  the line or record (the first bad one), and what was kept and what skipped, e.g.
  `data/raw/web/files/crawl.warc.gz: byte 81234: record cut off (2000 of 5210 bytes); kept the 41
  record(s) before it, skipped the rest of the file (14022 bytes)`.
- The stage logs each as `warning: <line>` through its `log` (the terminal under `shardline
  stage`, the flow run's log under Prefect) before it judges `clean.max_bad_fraction`, and
  stats.json keeps them per source (`damaged`), which the evidence card counts. Parts skipped as
  done give their lines again from their markers: the damage is still there.
"""

from __future__ import annotations

from typing import Sequence

from shardline.core.layout import Layout
from shardline.data.readstats import ReadStats


def of(rel: str, stats: ReadStats, size: int) -> dict:
    return {"file": rel, "bytes": size, "records": stats.records, "bad": stats.bad, "first": stats.samples[0],
            "cut": list(stats.cut) if stats.cut else None}


def _merge(into: dict, more: dict) -> None:
    into["records"] += more["records"]
    into["bad"] += more["bad"]
    into["cut"] = into["cut"] or more["cut"]


def line(shown: str, d: dict) -> str:
    """The one line for a damaged file `shown` (its path as the user knows it)."""
    kept = d["records"] - d["bad"]
    if d["cut"]:
        at, what = d["cut"]
        out = (f"{shown}: byte {at}: {what}; kept the {kept} record(s) before it, skipped the rest of the file "
               f"({max(d['bytes'] - at, 0)} bytes)")
        if d["bad"] > 1:
            out += f", and {d['bad'] - 1} unreadable record(s) before it (the first: {d['first']})"
        return out
    return (f"{shown}: skipped {d['bad']} unreadable record(s) of {d['records']} (the first: {d['first']}); "
            f"kept the other {kept}")


def collect(parts: Sequence, markers: Sequence[dict], layout: Layout) -> dict[str, list[str]]:
    files: dict[tuple[str, str], dict] = {}
    for part, marker in zip(parts, markers):
        for d in marker["stats"].get("damaged", ()):  # markers made before damage was recorded have none
            key = (part.work.source.name, d["file"])
            if key in files:
                _merge(files[key], d)
            else:
                files[key] = dict(d)
    out: dict[str, list[str]] = {}
    for (source, rel), d in files.items():
        out.setdefault(source, []).append(line(layout.rel(layout.raw_files(source) / rel), d))
    return out
