"""The evidence card's held-out sections: the split, the evals with their noise, what changed, the steps worth a look.

Contract (shardline.results.report assembles the card from these):
- `split` : per source the held-out documents, bytes, tokens and blocks, what decided the split,
  each document's cut (eval.doc_bytes), the fingerprints.
- `evaluation` : every eval of train.jsonl: the training loss of the steps up to it (mean and 95%
  interval), the held-out loss by the run's own mix (what that training loss averages over), the
  total with sources weighted equally (the one runs are compared by) and per source loss, bits per
  byte and documents, each with its 95% interval over documents (shardline.training.noise). Then the
  flags of the last eval: a source judged on too few documents or too wide an interval (with the
  documents eval.resolution needs), a held-out set easier than the training data; and, for a run that
  continued from another data version or mix, its before/after on this run's held-out set.
- `what_changed` : a run with a parent (the baseline of a `dvc exp run`, handed in by the
  orchestrator) gets shardline diff's sections against it (shardline.results.diff), the same code.
- `steps` : the documents of the slowest slow step (throughput.slowest: the one the failure modes name)
  and of the highest-loss step, its loss over the median of the SPIKE_BASE steps before it (early
  steps are high because they are early) (shardline.results.steps).
- `drift` : a source's val loss rising more than eval.drift_tolerance between two evals.
"""

from __future__ import annotations

import statistics
from typing import Callable

from shardline.core import fsio, shardformat
from shardline.core.markup import block, code, text
from shardline.core.config import Params
from shardline.core.errors import ShardlineError
from shardline.core.layout import Layout
from shardline.data.clean.stage import split as split_rule
from shardline.training import noise
from shardline.training.throughput import slowest
from shardline.training.steplog import equal, eval_rows, eval_sources, own_mix
from shardline.training.records import Manifest

SHARDS_FIRST = "; run the shard stage first (dvc repro shard)"
SPIKE_BASE = 20  # steps whose median a step's loss is set against


def split(params: Params, layout: Layout, stats: dict) -> list[str]:
    cap = params.eval.doc_bytes
    lines = ["## Held-out split", "", "| source | held-out docs | bytes | tokens scored | blocks | decided by | training docs |",
             "|---|---|---|---|---|---|---|"]
    for s in params.sources:
        st = stats["sources"][s.name]
        h = st["heldout"]
        ix = shardformat.read_index(layout.shards_of(s.name, "val"), SHARDS_FIRST, layout.rel)
        lines.append(f"| {text(s.name)} | {h['docs']:,} | {h['bytes']:,} | {ix['total_tokens']:,} | "
                     f"{ix['total_blocks']:,} | "
                     f"{split_rule.DECIDED_BY[h.get('clamp')]} | {st['docs_out']:,} |")
    cut = stats.get("split", {})
    held = fsio.read_json(layout.clean_split).get("heldout") if layout.clean_split.exists() else None
    lines += ["", "Held-out sets (fingerprints): " + ", ".join(f"{text(n)} {h['sha256'][:12]}" for n, h in held.items())
              if held else "Held-out sets: no fingerprint on record (a clean stage from before they were kept).",
              "", f"Split: keyed hash of each document's source and content, fraction {cut.get('fraction')}, "
                  f"min {cut.get('min_docs')} / max {cut.get('max_docs')} documents per source; "
                  + (f"each held-out document is scored on its first {cap:,} bytes (eval.doc_bytes), so no long "
                     "document outweighs the rest" if cap else "whole documents are scored (eval.doc_bytes: null)")
                  + "; training copies of held-out documents dropped: "
                  + ", ".join(f"{text(n)} {s['heldout_copies']['docs']}" for n, s in stats["sources"].items())
                  + ".", ""]
    return lines


def _pm(v: dict, key: str = "loss") -> str:
    ci = v.get(f"{key}_ci")
    return f"{v[key]:.4f}" + (f" ±{noise.half_width(ci):.3f}" if ci else "")


def evaluation(rows: list[dict], manifest: Manifest | None, params: Params, repeats: str = "") -> list[str]:
    """`repeats`: the sources training went through more than once, and how often (the card's resume
    point knows), said when held-out loss ends above training loss."""
    evals = eval_rows(rows)
    lines = ["## Held-out evaluation", ""]
    if not evals:
        return lines + ["No evaluation recorded (eval.every: 0, or no held-out blocks).", ""]
    names = eval_sources(evals)
    lines += ["Loss in nats per token, ± the half-width of its 95% interval over held-out documents (a bootstrap); "
              "the training loss is the mean of the steps up to the eval. Held-out by this run's mix is what the "
              "training loss averages over; the equal-weight total is what runs are compared by "
              "(`shardline diff`).", "",
              "| step | training loss | held-out (own mix) | total (equal weights) | " + " | ".join(
                  f"{text(n)} loss | {text(n)} bpb | {text(n)} docs" for n in names) + " |",
              "|---" * (4 + 3 * len(names)) + "|"]
    for r in evals:
        e, train = r["eval"], noise.recent_train_loss(rows, r["step"])
        tr = f"{train[0]:.4f} ±{train[1]:.3f}" if train else "-"
        per = " | ".join(f"{_pm(e['sources'][n])} | {_pm(e['sources'][n], 'bpb')} | {e['sources'][n].get('docs', '-')}"
                         if n in e["sources"] else "- | - | -" for n in names)
        lines.append(f"| {r['step']} | {tr} | {_pm(own_mix(e))} | {_pm(equal(e))} | {per} |")
    cost = sum(r["eval"]["eval_s"] for r in evals)
    train_s = sum(r["step_s"] for r in rows)
    lines += ["", f"{len(evals)} eval(s), {cost:.1f} s in all = {100 * cost / max(train_s, 1e-9):.1f}% of the "
                  f"{train_s:.1f} s of training steps.", ""]
    last = evals[-1]
    said = [noise.thin(text(n), v, params.eval.resolution) for n, v in last["eval"]["sources"].items()]
    said.append(noise.against_training(own_mix(last["eval"]), noise.recent_train_loss(rows, last["step"]), repeats))
    said = [s for s in said if s]
    lines += [f"- {s}" for s in said] + ([""] if said else [
        f"Held-out loss at step {last['step']} is within noise of the training loss, and every source is judged to "
        f"±{params.eval.resolution:g} nats or better.", ""])
    return lines + _before_after(manifest, last["eval"])


def _before_after(manifest: Manifest | None, latest: dict) -> list[str]:
    origin = manifest.lineage.continued_from if manifest else None
    if not origin:
        return []
    before, now = origin.get("eval_now"), manifest.eval or latest
    lines = [f"### Before and after: continued from {code(origin['checkpoint'])} (step {origin['step']})", "",
             f"What changed: {'; '.join(map(text, origin['changes']))}. Both are judged on this run's held-out "
             "set.", ""]
    if origin.get("heldout") != manifest.lineage.heldout:  # a re-split (an upgrade's, or eval's settings)
        lines += [f"The held-out set changed at step {origin['step']}: the val losses above that step were "
                  "measured on other documents; compare across it only in the table below.", ""]
    if not before:
        return lines + ["(the parent was not evaluated on this held-out set: eval was off at the resume)", ""]
    lines += ["| source | before loss | after loss | change (95% interval) | before bpb | after bpb | change (95% interval) |",
              "|---|---|---|---|---|---|---|"]
    for n, b in before["sources"].items():
        a = now["sources"].get(n)
        if not a:
            continue
        d = _paired(before, now, n)
        cell = lambda k: (f"{a[k] - b[k]:+.4f}" + (f" [{d[k]['interval'][0]:+.3f}, {d[k]['interval'][1]:+.3f}]"  # noqa: E731
                                                  f"{', within noise' if d[k]['within_noise'] else ''}" if d else ""))
        lines.append(f"| {text(n)} | {b['loss']:.4f} | {a['loss']:.4f} | {cell('loss')} | {b['bpb']:.4f} | "
                     f"{a['bpb']:.4f} | "
                     f"{cell('bpb')} |")
    if set(before["sources"]) == set(now["sources"]):  # one weighting for both, whatever the mixes: equal
        b, a = equal(before), equal(now)
        lines.append(f"| total (sources weighted equally) | {b['loss']:.4f} | {a['loss']:.4f} | {a['loss'] - b['loss']:+.4f} | "
                     f"{b['bpb']:.4f} | {a['bpb']:.4f} | {a['bpb'] - b['bpb']:+.4f} |")
    return lines + [""]


def _paired(before: dict, after: dict, source: str) -> dict | None:
    """The change's intervals when both evals scored the same blocks (their per-document sums pair)."""
    if not before.get("heldout_blocks") or before.get("heldout_blocks") != after.get("heldout_blocks"):
        return None
    docs = [e.get("docs", {}).get(source) for e in (before, after)]
    return noise.difference(*(noise.Docs.of(d) for d in docs)) if all(docs) else None


def what_changed(parent, run, doc_bytes: int | None, here: Layout) -> list[str]:
    """shardline diff's sections between the parent run and this one, as the card's lines."""
    from shardline.results import diff

    c = diff.compare(parent, run, doc_bytes, here)
    return [f"## What changed since {text(parent.name)}", "", *block(diff.render(c)), ""]


def steps(layout: Layout, params: Params, rows: list[dict], log: Callable[[str], None]) -> list[str]:
    """The documents of the slowest step and of the highest-loss step."""
    from shardline.results.steps import named

    losses = [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None]
    # against the median of the steps before it: early steps' losses are high because they are early
    jumps = [(loss / statistics.median(v for _, v in losses[i - SPIKE_BASE:i]), step)
             for i, (step, loss) in enumerate(losses) if i >= SPIKE_BASE]
    worst = slowest(rows)  # the one the failure modes and the train stage's last line name
    which = {**({"slowest": worst["step"]} if worst else {}), **({"highest-loss": max(jumps)[1]} if jumps else {})}
    if not which:
        return []
    try:
        found = named(layout, params, which)
    except ShardlineError as e:  # the card still says what it can
        log(f"report: the steps' documents are not named: {e}")
        return ["## Steps worth a look", "", f"Not named: {text(e)}", ""]
    lines = ["## Steps worth a look", ""]
    for label, f in found.items():
        docs = "; ".join(f"{text(n)}: {', '.join(map(code, ids))}"
                         + (f" and {total - len(ids)} more" if total > len(ids) else "")
                         for n, (ids, total) in f["docs"].items())
        what = " (its loss over the median of the 20 steps before it)" if label == "highest-loss" else ""
        lines.append(f"- the {label} step{what}, {f['step']}: {docs} (`shardline explain --step {f['step']}` lists "
                     "every row and token range)")
    return lines + [""]


def drift(rows: list[dict], tolerance: float) -> list[str]:
    evals = eval_rows(rows)
    out = []
    for prev, cur in zip(evals, evals[1:]):
        for n, v in cur["eval"]["sources"].items():
            p = prev["eval"]["sources"].get(n)
            if p and v["loss"] > p["loss"] * (1 + tolerance):
                out.append(f"- metric drift: {text(n)} val loss rose {p['loss']:.4f} -> {v['loss']:.4f} "
                           f"({100 * (v['loss'] / p['loss'] - 1):+.1f}%) from step {prev['step']} to {cur['step']} "
                           f"(> eval.drift_tolerance {tolerance:.0%})")
    return out
