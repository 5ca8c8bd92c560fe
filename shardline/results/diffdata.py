"""`shardline diff`'s data section: what two runs were trained on, below the params.

Contract: `data(a, b)` compares two runs (shardline.results.runs.Run) source by source:
- files added, removed and changed (by sha256, from each lineage's sources), and a Hub source's
  resolved revision;
- every rule whose settings (the clean section and the source's own `clean:`) or code (the
  lineage's clean_rule_code: this release's clean code version, or a plug-in's release) differ;
- per rule, the documents it dropped in A and not in B and the reverse, counted, with the first
  few ids: from each run's drop logs (every phase-1 drop: part-N.drops.arrow) and selections
  (phase 2's dedup, near-dedup and held-out copies), when both runs' data is at hand; else
  `documents` says why not. The held-out documents that moved (held out in one run only: a rule
  dropped one, or the split's clamp moved) apart, under `heldout`: the split is no rule;
- tokens per source (training side and held out), the mix, and whether the held-out sets are the
  same (their fingerprints), with what that means for the results.
An empty section (`changed` False) means the two runs saw the same data the same way.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from shardline.core import shardformat
from shardline.core.errors import ShardlineError
from shardline.core.filenames import CLEAN_PARTS, drops_of
from shardline.data.clean.stage import dropped
from shardline.data.clean.stage.parts import read_selection
from shardline.results.runs import Run

SHOW = 3  # ids shown per rule and direction
HELD = "heldout"  # not a rule: the split, whose documents move when a rule drops one it held out


def _files(run: Run) -> dict[str, dict[str, str]]:
    return {s.name: {f.path: f.sha256 for f in s.files or ()} for s in run.lineage.sources}


def _revisions(run: Run) -> dict[str, str | None]:
    return {s.name: (s.dataset or {}).get("resolved") for s in run.lineage.sources}


def _rules(run: Run, source: str) -> dict:
    """The clean settings `source` ran with: the section, its own `clean:` over it."""
    lin = run.lineage
    return {**lin.clean_rules, **(lin.source_clean_rules.get(source) or {})}


def _code(run: Run, source: str) -> dict[str, str]:
    return dict((run.lineage.clean_rule_code or {}).get(source) or {})


def who_dropped(run: Run, source: str) -> dict[str, str]:
    """doc id -> the rule that dropped it, or phase 2's reason, or "heldout" (held out, not trained
    on); every document the clean stage read is in it or trained."""
    out: dict[str, str] = {}
    for part in sorted((run.layout.clean / source).glob(CLEAN_PARTS)):
        log = drops_of(part)
        if not log.exists():
            raise ShardlineError(f"{run.layout.rel(log)}: missing (cleaned before drops were logged)")
        d = dropped.read_log(log)
        out.update(zip(d["id"], d["rule"]))
        sel = read_selection(part)
        ids = pq.read_table(part, columns=["id"]).column(0).to_pylist()
        out.update((ids[r], HELD) for r in sel["heldout"])
        for reason, rows in sel.get("why", {}).items():
            out.update((ids[r], reason) for r, *_ in rows)
    return out


def _documents(a: Run, b: Run, source: str) -> dict:
    """Per rule: documents it dropped in A and not in B ("a_only") and the reverse ("b_only")."""
    if not (a.data and b.data):
        missing = " and ".join(r.name for r in (a, b) if not r.data)
        return {"why_not": f"the data {missing} trained on is not at hand (check out its revision, or name the revision "
                           "rather than the checkpoint)"}
    try:
        da, db = who_dropped(a, source), who_dropped(b, source)
    except ShardlineError as e:
        return {"why_not": str(e)}
    out = {}
    for rule in sorted(set(da.values()) | set(db.values())):
        only_a = sorted(d for d, r in da.items() if r == rule and db.get(d) != rule)
        only_b = sorted(d for d, r in db.items() if r == rule and da.get(d) != rule)
        if only_a or only_b:
            out[rule] = {"a_only": len(only_a), "b_only": len(only_b), "a_ids": only_a[:SHOW], "b_ids": only_b[:SHOW]}
    return {"rules": {r: c for r, c in out.items() if r != HELD}, **({"heldout": out[HELD]} if HELD in out else {})}


def _tokens(run: Run, source: str) -> dict | None:
    if not run.data:
        return None
    sides = {}
    for side in ("train", "val"):
        ix = shardformat.read_index(run.layout.shards_of(source, side), "", run.layout.rel)
        sides[side] = ix["total_tokens"]
    return sides


def data(a: Run, b: Run) -> dict:
    fa, fb = _files(a), _files(b)
    sources = list(dict.fromkeys(a.sources() + b.sources()))
    out: dict = {"sources": {}, "mix": {"a": a.lineage.mix, "b": b.lineage.mix, "same": a.lineage.mix == b.lineage.mix}}
    changed = not out["mix"]["same"]
    for s in sources:
        xa, xb = fa.get(s, {}), fb.get(s, {})
        files = {"added": sorted(set(xb) - set(xa)), "removed": sorted(set(xa) - set(xb)),
                 "changed": sorted(p for p in set(xa) & set(xb) if xa[p] != xb[p])}
        ra, rb = _rules(a, s), _rules(b, s)
        rules = [{"rule": k, "what": "settings", "a": ra.get(k), "b": rb.get(k)}
                 for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)]
        ca, cb = _code(a, s), _code(b, s)
        rules += [{"rule": k, "what": "code", "a": ca.get(k), "b": cb.get(k)}
                  for k in sorted(set(ca) & set(cb)) if ca[k] != cb[k]]
        entry = {"in": [s in fa, s in fb], "files": files, "revision": [_revisions(a).get(s), _revisions(b).get(s)],
                 "rules": rules, "documents": _documents(a, b, s) if s in fa and s in fb else {"why_not": "one run lacks it"},
                 "tokens": [_tokens(a, s), _tokens(b, s)]}
        out["sources"][s] = entry
        changed |= bool(any(files.values()) or rules or entry["documents"].get("rules") or entry["documents"].get(HELD)
                        or entry["in"] != [True, True]
                        or entry["revision"][0] != entry["revision"][1] or entry["tokens"][0] != entry["tokens"][1])
    ha, hb = a.lineage.heldout, b.lineage.heldout
    out["heldout"] = {"same": ha is not None and ha == hb,
                      "sources": {s: (ha or {}).get(s) == (hb or {}).get(s) and ha is not None for s in sources}}
    out["changed"] = changed
    return out


def _short(v) -> str:
    s = str(v)
    return s if len(s) <= 40 else s[:37] + "..."


def render(d: dict) -> list[str]:
    if not d["changed"]:
        return ["data: the same (files, rules, documents per rule, tokens, mix)"]
    lines = ["data:"]
    if not d["mix"]["same"]:
        lines.append(f"  mix: {d['mix']['a']} -> {d['mix']['b']}")
    for s, e in d["sources"].items():
        if e["in"] != [True, True]:
            lines.append(f"  {s}: {'only in B' if e['in'][1] else 'only in A'}")
            continue
        f = e["files"]
        if any(f.values()):
            lines.append(f"  {s}: files +{len(f['added'])} -{len(f['removed'])} ~{len(f['changed'])}"
                         + "".join(f"; {k} {', '.join(v[:SHOW])}{' ...' if len(v) > SHOW else ''}" for k, v in f.items() if v))
        if e["revision"][0] != e["revision"][1]:
            lines.append(f"  {s}: revision {e['revision'][0]} -> {e['revision'][1]}")
        for r in e["rules"]:
            lines.append(f"  {s}: rule {r['rule']} ({r['what']}): {_short(r['a'])} -> {_short(r['b'])}")
        docs = e["documents"]
        if "why_not" in docs:
            lines.append(f"  {s}: documents per rule: not compared ({docs['why_not']})")
        for rule, c in [*docs.get("rules", {}).items(), *([("held out", docs["heldout"])] if "heldout" in docs else [])]:
            verb = "" if rule == "held out" else "dropped "
            lines.append(f"  {s}: {rule}: {verb}in A only {c['a_only']:,}" + (f" ({', '.join(c['a_ids'])}...)" if c["a_ids"] else "")
                         + f", in B only {c['b_only']:,}" + (f" ({', '.join(c['b_ids'])}...)" if c["b_ids"] else ""))
        ta, tb = e["tokens"]
        if ta and tb and ta != tb:
            lines.append(f"  {s}: tokens {ta['train']:,} -> {tb['train']:,} (held out {ta['val']:,} -> {tb['val']:,})")
    return lines


def heldout_line(d: dict) -> str:
    if d["heldout"]["same"]:
        return "held-out sets: the same documents (fingerprints equal): results below pair them one to one"
    moved = [s for s, same in d["heldout"]["sources"].items() if not same]
    return (f"held-out sets: different for {', '.join(moved)}: results below are on the documents held out in both "
            "(each model with its own tokenizer), not on either run's own held-out set")

