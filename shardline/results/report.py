"""report stage: data/reports/evidence.md + train.png, the evidence card of the line.

Contract: a pure function of the line's artifacts (shard indexes, clean stats, training
metrics, checkpoints and their manifests): same inputs, same card. It states the data version
and lineage; the held-out split (documents, bytes, tokens and blocks per source); shards (count
per source, balance, the resume point); held-out evaluation (val loss and bits per byte per
source over steps, each with its 95% interval over documents, the flags of a thin or too easy
held-out set: shardline.results.card_eval), the latest downstream task results (eval.json's
"tasks": training's and `shardline eval --tasks`'s) and, when the run continued from a checkpoint
of another data version or mix, a before/after table per source on the same held-out set; with a
`parent` (an experiment's baseline, which only the orchestrator knows) what changed since it
(shardline diff's sections); the documents of the slowest and of the highest-loss step;
throughput (median tokens/s, p95 step time, data-wait share, MFU); checkpoints (saved, valid,
resumed from); failure modes seen (resumes, torn checkpoints skipped, quarantined records, the
damaged raw files the clean stage read past, steps the training guards skipped and their rollbacks, slow steps and their cause, metric drift: a source's val loss rising more than
eval.drift_tolerance between two evals); ops notes. Orchestrators add what only they know
(retries) around it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable

from shardline.core import fsio
from shardline.core.markup import code, text
from shardline.results import card_eval
from shardline.results.runs import Run
from shardline.data.clean.stage.summary import read as clean_stats
from shardline.training import checkpoint, guard, task_results
from shardline.core.config import Params
from shardline.core.layout import Layout
from shardline.core.filenames import EVAL_JSON, TRAIN_STATE
from shardline.core.remedies import remedy
from shardline.core.shardformat import read_index
from shardline.stream.mixing import Schedule
from shardline.training.records import Lineage
from shardline.training.throughput import slow_steps, summarize
from shardline.training.steplog import eval_rows, eval_sources, read_records

Log = Callable[[str], None]
SHARDS_FIRST = "; run the shard stage first (dvc repro shard)"


def _figure(rows: list[dict]):
    """train.png's figure: train loss, each source's val loss and tokens/s (one legend for all three
    kinds), and the held-out bits per byte per source. A source keeps its colour in both panels;
    tokens/s is drawn in grey, dashed, a colour no source takes."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the PNG only
    import matplotlib.pyplot as plt

    evals = eval_rows(rows)
    names = eval_sources(evals)
    palette = [f"C{i}" for i in range(10) if i != 7]  # the default cycle but its grey (C7): tokens/s's
    colour = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    fig, axes = plt.subplots(1, 2 if evals else 1, figsize=(12 if evals else 8, 4), dpi=100, squeeze=False)
    ax = axes[0][0]
    steps = [r["step"] for r in rows]
    ax.plot(steps, [_nan(r["loss"]) for r in rows], color="black", lw=1, label="train loss")
    for n in names:
        pts = [(r["step"], r["eval"]["sources"][n]["loss"]) for r in evals if n in r["eval"]["sources"]]
        ax.plot(*zip(*pts), marker="o", color=colour[n], label=f"val loss {n}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax2 = ax.twinx()
    ax2.plot(steps, [r["tokens_per_s"] for r in rows], color="0.7", lw=1, ls="--", label="tokens/s (right axis)")
    ax2.set_ylabel("tokens/s")
    ax.set_zorder(ax2.get_zorder() + 1)  # the losses over the throughput line, not under it
    ax.patch.set_visible(False)
    handles = [h for a in (ax, ax2) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles, [h.get_label() for h in handles], loc="upper right", fontsize="small")
    ax.set_title("training: loss and throughput")
    if evals:
        bx = axes[0][1]
        for n in names:
            pts = [(r["step"], r["eval"]["sources"][n]["bpb"]) for r in evals if n in r["eval"]["sources"]]
            bx.plot(*zip(*pts), marker="o", color=colour[n], label=n)
        bx.set_xlabel("step")
        bx.set_ylabel("bits per byte")
        bx.set_title("held-out bits per byte, per source")
        bx.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _plot(rows: list[dict], out: Path) -> None:
    fig = _figure(rows)  # first: it chooses the Agg backend before pyplot is imported
    import matplotlib.pyplot as plt

    with fsio.atomic_writer(out) as f:
        fig.savefig(f, format="png", metadata={"Software": None})  # no version stamp: same inputs, same bytes
    plt.close(fig)


def _drops(stats: dict, layout: Layout) -> list[str]:
    """Per source, every check that removed documents, in the order they run, then phase 2."""
    lines = ["## What cleaning removed", "", "A transform (whitespace, c4's line removal) drops no document: its MB are "
             "the bytes it took out.", "", "| source | rule | docs | of docs in | MB | sample |", "|---|---|---|---|---|---|"]
    quiet = []
    for name, st in stats["sources"].items():
        order = stats.get("rules_order", {})
        order = order.get(name, []) if isinstance(order, dict) else order
        tallies = [(r, st["rules"].get(r, {"docs": 0, "bytes": 0})) for r in order]
        tallies += [(r, st[r]) for r in ("dedup", "near_dedup", "heldout_copies", "heldout_near_copies") if r in st]
        for rule, c in tallies:
            if not c["docs"] and not c["bytes"]:
                quiet.append(f"{text(name)}: {text(rule)}")
                continue
            share = c["docs"] / st["docs_in"] if st["docs_in"] else 0
            sample = code(layout.dropped_rule(name, rule).relative_to(layout.root), cell=True) if c["docs"] else ""
            lines.append(f"| {text(name)} | {text(rule)} | {c['docs']:,} | {share:.2%} | {c['bytes'] / 1e6:.2f} | "
                         f"{sample} |")
    near = stats.get("near_dedup")
    if near:
        lines += ["", f"Near-duplicates: {near['docs_in_clusters']:,} documents in {near['clusters']:,} clusters "
                      f"(MinHash LSH, 50% detection at Jaccard {near['threshold']}); each cluster keeps its first."]
    if quiet:
        lines += ["", "Removed nothing: " + ", ".join(quiet) + "."]
    return lines + ["", "`shardline explain <doc-id>` says why any one document went, or where it was kept.", ""]


def _model_line(lin: Lineage) -> str:
    m, train = lin.params["model"], lin.params["train"]
    shape = ", ".join(f"{k} {m[k]}" for k in ("n_layer", "n_head", "n_kv_head", "d_model", "ffn_hidden")
                      if m.get(k) is not None)
    line = f"- model: {m.get('arch', 'gpt2')} ({shape}), {train.get('attention', 'causal')} attention"
    init = lin.init
    if init:
        line += (f"; started from {code(init.source)} ({text(init.architecture)}, held-out loss before training "
                 f"{init.eval['total']['loss']:.4f})" if init.eval else
                 f"; started from {code(init.source)} ({text(init.architecture)})")
    return line


def build(params: Params, layout: Layout, parent: "Run | None" = None, log: Log = print) -> str:
    """The card; `parent`: the run this one is compared with (an experiment's baseline), when known."""
    lines = ["# Shardline evidence card", ""]
    ck_root = layout.checkpoints
    entries = checkpoint.entries(ck_root)
    latest = next((e for e in reversed(entries) if e.valid), None)
    manifest = checkpoint.read_manifest(latest.path) if latest else None
    state = json.loads((latest.path / TRAIN_STATE).read_text()) if latest else None

    lines += ["## Data version and lineage", ""]
    if manifest:
        lin = manifest.lineage
        dv = lin.data_version
        lines += [f"- shards content hash `{dv.shards_sha256[:16]}`, DVC md5 `{dv.dvc_md5}`, "
                  f"tokenizer `{(dv.tokenizer_sha256 or '')[:16]}`",
                  f"- mix {code(json.dumps(lin.mix))}; code {code(lin.code.commit)}"
                  f"{' (dirty)' if lin.code.dirty else ''}; "
                  f"parent {code(lin.parent) if lin.parent else '(fresh start)'}",
                  "- sources: " + ", ".join(f"{text(s.name)} ({code(s.uri)}, {len(s.files or [])} files)"
                                            for s in lin.sources),
                  f"- cleaning rules: {code(json.dumps(lin.clean_rules, sort_keys=True))}", _model_line(lin), ""]
    else:
        lines += ["No valid checkpoint yet.", ""]
    stats = clean_stats(layout)
    lines += card_eval.split(params, layout, stats)
    lines += _drops(stats, layout)

    lines += ["## Shards", "", "| source | shards | blocks | blocks/shard min-max | tokens | tail dropped |",
              "|---|---|---|---|---|---|"]
    sizes, repeats = {}, ""
    for s in params.sources:
        ix = read_index(layout.shards_of(s.name), SHARDS_FIRST, layout.rel)
        counts = [x["blocks"] for x in ix["shards"]]
        sizes[s.name] = ix["total_blocks"]
        lines.append(f"| {text(s.name)} | {len(counts)} | {ix['total_blocks']:,} | {min(counts)}-{max(counts)} | "
                     f"{ix['total_tokens']:,} | {ix['tail_tokens_dropped']} |")
    if state and params.mix:
        pos = state["loader"]["blocks_consumed"]
        per = Schedule(params.mix, list(sizes)).counts_before(pos)
        epochs = ", ".join(f"{text(n)}: {c / sizes[n]:.2f} epochs" for n, c in zip(sizes, per.tolist()))
        repeats = ", ".join(f"{text(n)} {c / sizes[n]:.1f} times" for n, c in zip(sizes, per.tolist()) if c > sizes[n])
        lines += ["", f"Resume point: {pos:,} blocks consumed ({state['loader']['global_batches_consumed']:,} "
                      f"global batches) at step {state['step']}; {epochs}."]

    rows = read_records(layout.train_log)
    lines += [""] + card_eval.evaluation(rows, manifest, params, repeats)
    if parent is not None and latest is not None:
        lines += card_eval.what_changed(parent, Run.open("this run", layout, latest.path), params.eval.doc_bytes, layout)
    lines += card_eval.steps(layout, params, rows, log)
    metric = layout.metrics / EVAL_JSON  # training's task results and `shardline eval --tasks`'s, merged
    tasks = fsio.read_record(metric, remedy(layout, metric), shown=layout.rel(metric)).get("tasks") \
        if metric.exists() else None
    if tasks:
        lines += ["## Downstream tasks (lm-evaluation-harness)", ""] + task_results.table(tasks) + [""]
    if layout.mix_search_report.exists():  # written by `shardline mix-search`, not a stage: linked when there
        lines += ["## Mix search", "", f"- proxy runs, the fitted law and the recommended mix: "
                  f"[{layout.mix_search_report.name}]({layout.mix_search_report.name})", ""]
    lines += ["## Throughput", ""]
    if rows:  # the figures of data/metrics/train.json (throughput.summarize), so the two never disagree
        sm = summarize(rows, params.loader.global_batch * params.shard.seq_len)
        wait = (sm["data_wait_pct"] or 0) / 100
        lines += [f"- median {sm['median_tokens_per_s']:,.0f} tokens/s over {sm['steps']} steps",
                  f"- p95 step time {sm['p95_step_s']:.3f} s (median {statistics.median(r['step_s'] for r in rows):.3f} s)",
                  f"- data wait {wait:.2%} of step time" + (f"; mean MFU (estimate) {sm['mean_mfu']:.1%}"
                                                             if sm["mean_mfu"] is not None else ""),
                  f"- loss {_nan(rows[0]['loss']):.3f} at step {rows[0]['step']} -> {_nan(rows[-1]['loss']):.3f} at "
                  f"step {rows[-1]['step']}", "", "![train and val loss, tokens/s, val bits per byte](train.png)"]
    else:
        lines.append("No training steps recorded.")

    lines += ["", "## Checkpoints", ""]
    for e in entries:
        lines.append(f"- {code(e.path.name)}: {'valid' if e.valid else 'INVALID: ' + text(e.why)}")
    if state:
        lines.append(f"- latest valid: {code(latest.path.name)} (step {state['step']}, "
                     f"{state['tokens_seen']:,} tokens); "
                     f"this data version started at step {state.get('version_start_step', 0)}")

    lines += ["", "## Failure modes seen", ""]
    if state:
        lines.append(f"- training resumed {state.get('resumes', 0)} time(s) from a checkpoint")
    for name, s in stats["sources"].items():
        lines.append(f"- {text(name)}: {s['bad']} unreadable record(s) quarantined, {s['invalid_utf8']} with invalid "
                     f"UTF-8 repaired" + (f" (e.g. {code(s['samples'][0])})" if s["samples"] else ""))
        lines += damaged_files(s)
    skipped = [r["step"] for r in rows if r.get("guard") == "skip"]
    lines.append(f"- skipped steps (non-finite loss or gradient: no update): {len(skipped)}"
                 + (f" (step {', '.join(map(str, skipped))})" if skipped else ""))
    rollbacks = [e for r in rows for e in r.get("rollbacks", [])]
    lines.append(f"- rollbacks (loss spikes, runs of skipped steps): {len(rollbacks)}")
    lines += [f"  - {text(guard.describe(e))}" for e in rollbacks]
    count, *slowest = slow_steps(rows)  # the train stage's last line says the same (throughput.slow_steps)
    lines += [f"- {count}"] + [f"  - {s}" for s in slowest]
    traces = sorted(p for p in layout.profiles.iterdir() if not p.name.startswith(".")) if layout.profiles.exists() else []
    lines += [f"- profiled: [{p.name}]({p.relative_to(layout.reports)})" for p in traces]
    drift = card_eval.drift(rows, params.eval.drift_tolerance)
    lines += drift or [f"- metric drift: none (no source's val loss rose more than {params.eval.drift_tolerance:.0%} "
                       "between two evals)"]
    invalid = [e for e in entries if not e.valid]
    lines.append(f"- invalid checkpoints on disk: {len(invalid)}")

    lines += ["", "## Ops notes", ""]
    enc = {s.name: read_index(layout.tokens_of(s.name), "; run the tokenize stage first (dvc repro tokenize)",
                              layout.rel).get("encoder") for s in params.sources}
    lines.append(f"- encoder backend: {', '.join(f'{text(k)}: {text(v)}' for k, v in enc.items())}")
    if rows and wait < 0.01:
        lines.append("- input is not the bottleneck (data wait < 1%)")
    elif rows:
        lines.append("- data wait >= 1%: consider loader.num_workers or faster storage")
    lines.append("- MFU is an estimate against a guessed peak (monitor.guess_peak_flops)")
    return "\n".join(lines) + "\n"


def damaged_files(source_stats: dict) -> list[str]:
    """The card's count of the damaged raw files the clean stage read past, and its line for each."""
    damaged = source_stats.get("damaged", [])  # stats.json of a clean stage before it was recorded: none
    if not damaged:
        return []
    return [f"  - {len(damaged)} damaged file(s) read past, what preceded the damage kept:",
            *(f"    - {text(d)}" for d in damaged)]


def _nan(v: float | None) -> float:
    """A loss on record, NaN where it was not finite (JSON null: a skipped step)."""
    return float("nan") if v is None else v


def run(params: Params, layout: Layout, log: Log = print, mapper=None, parent: "Run | None" = None) -> dict:
    out = layout.reports
    out.mkdir(parents=True, exist_ok=True)
    rows = read_records(layout.train_log)
    if rows:
        _plot(rows, layout.plot)
    card = build(params, layout, parent, log)
    fsio.write_bytes(layout.evidence, card.encode())
    log(f"report: wrote {layout.rel(layout.evidence)}")
    return {"evidence": str(layout.evidence), "card": card}
