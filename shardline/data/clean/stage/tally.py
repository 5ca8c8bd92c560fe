"""data/clean/stats.json summed: the parts' tallies (their markers), and once the selections are made
their phase-2 tallies (held out, dedup, near_dedup, copies of held-out documents), per source and
in total; and the one judgement made on them before the split (`check_bad_fraction`).

Contract: `summarise(parts, markers, params, thresholds, near)` is stats.json's content but what the
stage adds once the split is done (damaged files, rule inputs, rule code): `rules_order` (each
source's checks, in order), `split` (eval's settings), `sources` (per source: parts, docs and bytes
in and out, records, bad, invalid_utf8, skipped, the first 20 bad-record samples, per check docs and
bytes, held out and each phase-2 reason) and `totals`; without `thresholds` (before the
selections) only the parts' own tallies. `check_bad_fraction` raises BadInput naming the source,
the fraction and the fix when a source's unreadable records pass `clean.max_bad_fraction`.
summary.py reads the file back.
"""

from __future__ import annotations

from shardline.core import fsio
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import selection_of
from shardline.data import frame
from shardline.data.clean.rules import registry as rules
from shardline.data.clean.stage import select


def summarise(parts: list[frame.Part], markers: list[dict], params: Params, thresholds: dict | None = None,
               near: dict | None = None) -> dict:
    out: dict = {"rules_order": {s.name: rules.names(params.clean_for(s)) for s in params.sources},
                 "split": params.eval.split(), "sources": {}, **({"near_dedup": near} if near else {})}
    for part, marker in zip(parts, markers):
        st = marker["stats"]
        tally = fsio.read_json(selection_of(part.work.out))["tally"] if thresholds else {}
        s = out["sources"].setdefault(part.work.source.name, {
            "parts": 0, "docs_in": 0, "bytes_in": 0, "records": 0, "bad": 0, "invalid_utf8": 0, "skipped": 0,
            "docs_out": 0, "bytes_out": 0, "samples": [], "rules": {},
            **{k: {"docs": 0, "bytes": 0} for k in ("heldout", *select.REASONS)}})
        s["parts"] += 1
        for k in ("docs_in", "bytes_in", "records", "bad", "invalid_utf8", "skipped"):
            s[k] += st.get(k, 0)  # a part made before `skipped` was counted has none
        s["samples"] = (s["samples"] + st["samples"])[:20]
        for name, c in st["rules"].items():
            r = s["rules"].setdefault(name, {"docs": 0, "bytes": 0})
            r["docs"] += c["docs"]
            r["bytes"] += c["bytes"]
        s["docs_out"] += st["docs_kept"]
        s["bytes_out"] += st["bytes_kept"]
        for k, c in tally.items():
            for unit in ("docs", "bytes"):
                s[k][unit] += c[unit]
                s[f"{unit}_out"] -= c[unit]  # docs_out/bytes_out: what trains
    for name, t in (thresholds or {}).items():
        out["sources"][name]["heldout"]["clamp"] = t.clamp
    totals = {k: sum(s[k] for s in out["sources"].values()) for k in ("docs_in", "docs_out", "bytes_in", "bytes_out", "bad")}
    totals["heldout_docs"] = sum(s["heldout"]["docs"] for s in out["sources"].values())
    out["totals"] = totals
    return out


def check_bad_fraction(summary: dict, params: Params, layout: Layout) -> None:
    limit = params.clean.max_bad_fraction
    for name, s in summary["sources"].items():
        if s["records"] and s["bad"] / s["records"] > limit:
            samples = "\n  ".join(s["samples"])
            raise BadInput(f"clean: source {name!r}: {s['bad']} of {s['records']} records unreadable "
                           f"({s['bad'] / s['records']:.1%} > clean.max_bad_fraction {limit:.1%}) in "
                           f"{layout.rel(layout.raw_files(name))}; first ones:\n  {samples}\n"
                           "Fix the input (or sources[].text_field / format), or raise clean.max_bad_fraction.")
