"""`shardline diff A B`: what changed between two runs, from the data down to the held-out figures.

Contract: `compare(a, b, doc_bytes, here)` of two runs (shardline.results.runs.Run) gives three
sections, each empty when nothing differs:
- data (shardline.results.diffdata): files, rules and their documents, tokens, mix, held-out sets;
- training: every params value that differs (model, train, loader, shard, tokenizer sections as
  each lineage recorded them), the code commit and dirty flag, train.init_from's model, steps and
  tokens seen;
- results: per source, held-out loss, bits per byte and per-document loss of A and B on the same
  documents, each change with its 95% interval over those documents (shardline.training.noise) and
  "within noise" when the interval covers 0; the total, sources weighted equally, likewise. Which
  documents, in order of preference: (1) both runs' last evals scored the very same held-out blocks
  (their manifests' `heldout_blocks`): their per-document sums pair one to one, no model is run;
  (2) both runs' data is at hand: both models judged on the documents held out in both
  (shardline.results.rejudge; kept in `here`, the project asking), each with its own tokenizer (losses per token are then compared only
  when the tokenizers are the same; bits per byte always); (3) else the recorded evals, resampled
  independently (`paired` False), which says so. `how` names the case. Each interval then takes in
  the seeds' noise where replicates (runs a seed apart, among A, B and `others`) measure it
  (shardline.results.seeds); where none do, the verdict says the seeds' noise is not measured.
`render` is the readable form; the evidence card's "what changed" uses the same two functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from shardline.core.layout import Layout

from shardline.results import diffdata, rejudge, seeds
from shardline.results.runs import Run
from shardline.training import noise
from shardline.training.records import Manifest

def training(a: Run, b: Run) -> dict:
    pa, pb = (seeds.flat({s: r.lineage.params.get(s, {}) for s in seeds.SECTIONS}) for r in (a, b))
    params = [{"key": k, "a": pa.get(k), "b": pb.get(k)} for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
    ca, cb = a.lineage.code, b.lineage.code
    init = [(r.lineage.init.source if r.lineage.init else None) for r in (a, b)]
    return {"params": params, "code": {"a": [ca.commit, ca.dirty], "b": [cb.commit, cb.dirty]},
            "init_from": init, "steps": [a.manifest.step, b.manifest.step],
            "tokens_seen": [a.state.get("tokens_seen"), b.state.get("tokens_seen")]}


def _recorded(run: Run) -> dict[str, noise.Docs]:
    ev = run.manifest.eval or {}
    return {s: noise.Docs.of(d) for s, d in (ev.get("docs") or {}).items()}


def results(a: Run, b: Run, same_heldout: bool, doc_bytes: int | None, here: Layout,
            others: Sequence[tuple[str, Manifest]] = ()) -> dict:
    ea, eb = a.manifest.eval or {}, b.manifest.eval or {}
    sources = [s for s in a.sources() if s in b.sources()]
    same_tokenizer = a.lineage.data_version.tokenizer_sha256 == b.lineage.data_version.tokenizer_sha256
    if ea.get("heldout_blocks") and ea.get("heldout_blocks") == eb.get("heldout_blocks") and ea.get("docs") and eb.get("docs"):
        how, da, db, paired = "the held-out blocks both runs' last evals scored (the same documents)", \
            _recorded(a), _recorded(b), True
    elif a.data and b.data:
        texts = {s: rejudge.common(a, b, s) for s in sources}
        n = ", ".join(f"{s} {len(t)}" for s, t in texts.items())
        how = (f"the documents held out in both runs ({n}), each cut to {doc_bytes} bytes and judged now, each model "
               "with its own tokenizer")
        da, db, paired = rejudge.judge(a, texts, doc_bytes, here), rejudge.judge(b, texts, doc_bytes, here), True
    else:
        how, da, db, paired = ("each run's own recorded eval: not the same documents, so the intervals resample each "
                               "on its own"), _recorded(a), _recorded(b), False
    figures = ("loss", "bpb", "doc_loss") if same_tokenizer else ("bpb",)
    per, draws = {}, {k: [] for k in figures}
    for i, s in enumerate(sources):
        if s not in da or s not in db:
            continue
        x, y = (noise.paired(da[s], db[s]) if paired else (da[s], db[s]))
        d = noise.difference(x, y, independent=not paired)
        per[s] = {k: d[k] for k in figures}
        ch = noise.change_draws(x, y, independent=not paired, stream=i)  # the sources drawn apart, for the total
        for k in figures:
            draws[k].append(ch[k])
    total = {}
    if per:
        for k in figures:
            a_, b_ = (sum(per[s][k][w] for s in per) / len(per) for w in ("a", "b"))
            total[k] = {"a": a_, "b": b_, "change": b_ - a_, **noise.judged(sum(draws[k]) / len(per))}
    spread = seeds.spread([(a.name, a.manifest), (b.name, b.manifest), *others]) if paired else None
    sigma = (spread or {}).get("sigma", {})
    for s, figs in [*per.items(), (seeds.TOTAL, total)]:
        for k in list(figs):
            figs[k] = seeds.widen(figs[k], sigma.get(s, {}).get(k))
    return {"how": how, "paired": paired, "same_tokenizer": same_tokenizer, "sources": per, "total": total,
            "figures": list(figures), "seed_spread": spread}


def compare(a: Run, b: Run, doc_bytes: int | None, here: Layout, others: Sequence[tuple[str, Manifest]] = ()) -> dict:
    """`others`: the other runs the repo records (name, manifest), among which replicates of A or B
    (a seed apart) give the seed spread (shardline.results.seeds)."""
    d = diffdata.data(a, b)
    return {"a": _who(a), "b": _who(b), "data": d, "training": training(a, b),
            "results": results(a, b, d["heldout"]["same"], doc_bytes, here, others)}


def _who(r: Run) -> dict:
    return {"name": r.name, "checkpoint": str(r.checkpoint), "step": r.manifest.step, "data_at_hand": r.data}


def _change(c: dict, digits: int = 4) -> str:
    lo, hi = c["interval"]
    if c.get("seed") is None:
        verdict = "within noise" if c["within_noise"] else "beyond the documents' noise; the seeds' is not measured"
    else:
        verdict = "within noise" if c["within_noise"] else "beyond noise"
    return (f"{c['a']:.{digits}f} -> {c['b']:.{digits}f} ({c['change']:+.{digits}f}, 95% [{lo:+.{digits}f}, "
            f"{hi:+.{digits}f}], {verdict})")


def render_results(r: dict) -> list[str]:
    lines = [f"results: on {r['how']}"]
    sp = r.get("seed_spread")
    if sp:
        lines.append(f"  intervals: documents and seeds (the seed spread of {len(sp['pairs'])} pair(s) of runs a seed "
                     f"apart: {'; '.join(' vs '.join(p) for p in sp['pairs'][:3])})")
    elif r["paired"]:
        lines.append("  intervals: documents only; no two runs here differ by a seed alone, so the seeds' noise is "
                     "unknown (a replicate measures it: dvc exp run -S train.seed=N)")
    if not r["same_tokenizer"]:
        lines.append("  (the tokenizers differ: losses per token are not comparable; bits per byte are)")
    names = {"loss": "loss", "bpb": "bits/byte", "doc_loss": "loss per doc"}
    for s, per in [*r["sources"].items(), *([("total (sources weighted equally)", r["total"])] if r["total"] else [])]:
        for k in r["figures"]:
            if k in per:
                docs = f" over {per[k]['docs']} docs" if "docs" in per[k] and isinstance(per[k]["docs"], int) else ""
                lines.append(f"  {s} {names[k]}: {_change(per[k])}{docs}")
    return lines


def render(c: dict) -> str:
    a, b = c["a"], c["b"]
    lines = [f"A: {a['name']}: {Path(a['checkpoint']).name}", f"B: {b['name']}: {Path(b['checkpoint']).name}"]
    lines += diffdata.render(c["data"])
    lines.append(diffdata.heldout_line(c["data"]))
    t = c["training"]
    if t["params"]:
        lines.append("training params:")
        lines += [f"  {p['key']}: {p['a']!r} -> {p['b']!r}" for p in t["params"]]
    else:
        lines.append("training params: the same")
    ca, cb = t["code"]["a"], t["code"]["b"]
    code = lambda x: f"{(x[0] or 'no git')[:12]}{' (dirty)' if x[1] else ''}"  # noqa: E731
    lines.append(f"code: {code(ca)}" + ("" if ca == cb else f" -> {code(cb)}"))
    if t["init_from"][0] or t["init_from"][1]:
        lines.append(f"init_from: {t['init_from'][0]} -> {t['init_from'][1]}")
    lines.append(f"steps: {t['steps'][0]} -> {t['steps'][1]}; tokens seen: {t['tokens_seen'][0]:,} -> "
                 f"{t['tokens_seen'][1]:,}")
    lines += render_results(c["results"])
    return "\n".join(lines)
