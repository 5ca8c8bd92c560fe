"""Downstream task results as the line keeps them: numbers per task and metric, and where they live.

Contract:
- `numbers(results)` turns lm-eval's results (what `lm_eval.simple_evaluate` returns) into
  {task: {metric: value}}: every finite number of results["results"][task], its metric named as
  lm-eval names it without the filter when the filter is lm-eval's default "none" ("acc,none" is
  "acc", "acc_stderr,none" is "acc_stderr"; "exact_match,strict-match" stays so), plus "samples",
  the examples scored. Strings (aliases, a stderr of "N/A") are left out: a DVC metric holds numbers.
- In training, a step's results are the "tasks" of that step's `eval` (its train.jsonl record and
  the manifest of the checkpoint saved at it: shardline.training.downstream).
- `shardline eval CKPT --tasks` keeps its results in data/metrics/tasks.json (`record`), per
  checkpoint, beside the record of that checkpoint's step as train.jsonl has it (step, loss,
  tokens, batches): they are this run's only while train.jsonl holds that same record.
- `latest(rows, recorded)` is eval.json's "tasks": per task, the newest result, with "step" (the
  step it judged), from the step records' evals and from the recorded results whose step record
  is still in `rows`, unchanged. Results of a checkpoint that a rollback, a fresh experiment or
  another run replaced never show; at one step a recorded result wins (it was run after training).
  `table(tasks)` is how the evidence card shows them.
"""

from __future__ import annotations

import math
from pathlib import Path

from shardline.core import fsio
from shardline.core.markup import text
from shardline.core.remedies import remedy_for

_FINGERPRINT = ("step", "loss", "tokens", "batches")  # what a step record says about the timeline it is of


def numbers(results: dict) -> dict[str, dict[str, float]]:
    out = {}
    for task, metrics in results["results"].items():
        row = {}
        for key, v in metrics.items():
            if key == "sample_len" or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue  # sample_len: lm-eval's count of examples, which "samples" is
            name, _, filt = key.partition(",")
            row[name if filt in ("", "none") else key] = v
        seen = (results.get("n-samples") or {}).get(task)
        if seen:
            row["samples"] = seen["effective"]
        out[task] = row
    return out


def fingerprint(row: dict) -> dict:
    """The part of a step record that says which timeline it is of."""
    return {k: row.get(k) for k in _FINGERPRINT}


def read(path: Path) -> dict:
    """data/metrics/tasks.json: {checkpoint name: {"step", "record", "tasks"}} (empty if there is none)."""
    return fsio.read_record(path, remedy_for(path)) if Path(path).exists() else {}


def record(path: Path, checkpoint: str, row: dict, tasks: dict) -> None:
    """Keep `tasks` as checkpoint's results, beside its step's record `row`; the results of other tasks
    kept for the same checkpoint stay, unless they were of another timeline's checkpoint of that name."""
    kept = read(path)
    entry = kept.get(checkpoint)
    old = entry["tasks"] if entry and entry["record"] == fingerprint(row) else {}
    kept[checkpoint] = {"step": row["step"], "record": fingerprint(row), "tasks": {**old, **tasks}}
    fsio.write_json(path, kept)


def latest(rows: list[dict], recorded: dict) -> dict:
    """eval.json's "tasks" (see the contract); empty when no task ran."""
    by_step = {r["step"]: r for r in rows}
    found = [(r["step"], 0, r["eval"]["tasks"]) for r in rows if (r.get("eval") or {}).get("tasks")]
    found += [(e["step"], 1, e["tasks"]) for e in recorded.values()
              if e["step"] in by_step and fingerprint(by_step[e["step"]]) == e["record"]]
    out = {}
    for step, _, tasks in sorted(found, key=lambda f: f[:2]):
        for name, metrics in tasks.items():
            out[name] = {**metrics, "step": step}
    return out


def table(tasks: dict) -> list[str]:
    """The evidence card's lines for eval.json's "tasks": per task and metric, the value, its
    stderr and the examples scored, at the step it judged."""
    lines = ["| task | metric | value | stderr | examples | step |", "|---|---|---|---|---|---|"]
    for name, m in tasks.items():
        for metric, v in m.items():
            if metric in ("samples", "step") or "_stderr" in metric:
                continue
            err = m.get(metric.replace(",", "_stderr,", 1) if "," in metric else f"{metric}_stderr")
            lines.append(f"| {text(name)} | {text(metric)} | {v:.4f} | {'' if err is None else f'{err:.4f}'} | "
                         f"{m.get('samples', '')} | {m['step']} |")
    return lines
