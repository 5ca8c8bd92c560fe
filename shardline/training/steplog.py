"""train.jsonl read back, and what is derived from it: the files DVC reads (CSV plots, eval.json,
headline.json) and the held-out totals.

Contract:
- `read_records(path)`: every step record, in order; a damaged line is BadInput naming the file, the
  line and the remedy; `truncate_records(path, step)` drops the lines past `step` (a resumed or rolled
  back run redoes them), a last line a kill tore with them.
- `write_derived(rows, out)`: train.csv and eval.csv (DVC plots read CSV), eval.json (the latest
  evaluation's figures, `tasks` when downstream tasks ran) and headline.json (the few figures DVC
  prints by default: shardline.training.headline).
- An eval's totals: `equal(ev)`, the sources weighted equally, the one total runs are compared by
  (computed from its sources for an eval recorded before it existed, whose `total` was its own
  mix's), and `own_mix(ev)`, weighted by the run's own mix, what its training loss averages over.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.filenames import EVAL_CSV, EVAL_JSON, HEADLINE_JSON, TASKS_JSON, TRAIN_CSV
from shardline.core.remedies import remedy_for
from shardline.training import task_results
from shardline.training.headline import headline


def median_tokens_per_s(records: list[dict]) -> float | None:
    """train.json's median_tokens_per_s, and headline.json's tokens/s."""
    return statistics.median(r["tokens_per_s"] for r in records) if records else None


def truncate_records(path: Path, step: int) -> None:
    """Drop the lines past `step`: they belong to a killed (or rolled back) run and will be redone,
    a last line the kill tore (no newline, not JSON) with them."""
    if Path(path).exists():
        keep = [ln for ln, rec in _records(path, torn=True) if rec["step"] <= step]
        fsio.write_bytes(path, b"".join(ln + b"\n" for ln in keep))


def read_records(path: Path) -> list[dict]:
    """The step records of a train.jsonl (empty if there is none yet); a damaged line is BadInput
    naming the file, the line and what rebuilds or restores it."""
    return [rec for _, rec in _records(path)] if Path(path).exists() else []


def _records(path: Path, torn: bool = False) -> list[tuple[bytes, dict]]:
    lines = Path(path).read_bytes().split(b"\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if torn and i == len(lines):  # an append a kill cut short: not yet a record
                break
            rec = None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            raise BadInput(f"{path}:{i}: not a step record (a JSON object with its step): truncated or damaged; "
                           f"{remedy_for(path)}")
        out.append((line, rec))
    return out


def eval_rows(rows: list[dict]) -> list[dict]:
    """The step records that carry a held-out eval."""
    return [r for r in rows if r.get("eval")]


def eval_sources(evals: list[dict]) -> list[str]:
    """The sources evaluated, in the order they were (params order)."""
    return list(dict.fromkeys(n for r in evals for n in r["eval"]["sources"]))


def write_derived(rows: list[dict], out: Path) -> None:
    """DVC plots read CSV, not JSON lines: train.csv (step, loss, lr, tokens/s) and eval.csv (step,
    val loss and bits per byte, in total and per source); eval.json is the latest evaluation, with
    "tasks" when downstream tasks ran (shardline.training.task_results.latest); headline.json its
    few figures that DVC prints by default (shardline.training.headline)."""
    def cell(v) -> str:  # a non-finite loss (a skipped step) is null in JSON, an empty cell here
        return "" if v is None else str(v)

    lines = ["step,loss,lr,tokens_per_s"] + [",".join(cell(r[k]) for k in ("step", "loss", "lr", "tokens_per_s"))
                                             for r in rows]
    fsio.write_bytes(out / TRAIN_CSV, ("\n".join(lines) + "\n").encode())
    evals = eval_rows(rows)
    names = eval_sources(evals)
    head = ["step", "val_loss", "val_bpb", "val_loss_own_mix", "val_bpb_own_mix"] + [
        f"{n}_{k}" for n in names for k in ("loss", "bpb")]
    lines = [",".join(head)]
    for r in evals:
        e, eq, own = r["eval"], equal(r["eval"]), own_mix(r["eval"])
        per = [e["sources"].get(n, {}).get(k, "") for n in names for k in ("loss", "bpb")]
        lines.append(",".join(str(v) for v in [r["step"], eq["loss"], eq["bpb"], own["loss"], own["bpb"], *per]))
    fsio.write_bytes(out / EVAL_CSV, ("\n".join(lines) + "\n").encode())
    metric = eval_metrics(evals[-1]["step"], evals[-1]["eval"]) if evals else {"step": None}
    tasks = task_results.latest(rows, task_results.read(out / TASKS_JSON))  # training's, `shardline eval --tasks`'s
    evaluation = {**metric, "tasks": tasks} if tasks else metric
    fsio.write_json(out / EVAL_JSON, evaluation)
    fsio.write_json(out / HEADLINE_JSON, headline(evaluation, median_tokens_per_s(rows)))  # dvc.yaml's metrics


def eval_metrics(step: int, ev: dict) -> dict:
    """eval.json, a DVC metric: the figures only (timings would make every `dvc metrics diff` noisy)."""
    return {"step": step, "total": equal(ev), "total_own_mix": own_mix(ev),
            "sources": {n: {k: v[k] for k in METRIC_KEYS if k in v} for n, v in ev["sources"].items()}}


METRIC_KEYS = ("loss", "bpb", "docs", "doc_loss", "loss_ci", "bpb_ci")


def equal(ev: dict) -> dict:
    """An eval's total under the one weighting runs are compared by: the sources weighted equally
    (computed from its sources when it predates that total: its `total` was then its own mix's)."""
    if ev["total"].get("weighting") == "equal":
        return ev["total"]
    src = ev["sources"].values()
    return {**{k: sum(v[k] for v in src) / max(len(src), 1) for k in ("loss", "bpb")}, "weighting": "equal"}


def own_mix(ev: dict) -> dict:
    """An eval's total weighted by its run's own mix (what its training loss averages over)."""
    return ev.get("total_own_mix") or ev["total"]
