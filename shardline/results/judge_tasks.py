"""Judge a checkpoint on downstream tasks: what `shardline eval CKPT --tasks` does.

Contract: `judge_tasks(path, layout, specs, limit, batch_size)` checks the task specs
(shardline.training.downstream: names or task YAML paths, one line naming a bad one), exports
the checkpoint as `shardline export` does (shardline.results.export: the same refusals) into a
temporary directory under .shardline/tmp/, and scores it there with lm-evaluation-harness in this
process (CUDA when there is one, else CPU). It returns {"checkpoint", "step", "tasks": {task: {metric: value}},
"kept": where the results are kept, or None, "why": why not}.

The results are kept (data/metrics/tasks.json, and eval.json rewritten from train.jsonl so it
shows them: shardline.training.task_results) only when the checkpoint is one of this run's: under
data/checkpoints, with its step's record in train.jsonl (and the held-out eval its manifest holds
equal to that record's). A checkpoint of another run, copied or archived, is judged and shown,
never attributed to this run's metrics.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

import torch

from shardline.core.layout import Layout
from shardline.results import export
from shardline.training import checkpoint, downstream, evaluate, task_results
from shardline.training.records import Manifest
from shardline.training.steplog import read_records, write_derived


def judge_tasks(path: Path, layout: Layout, specs: Sequence[str], limit: int | None = None,
                batch_size: int = 1) -> dict:
    tasks = downstream.Tasks.open(specs, layout.root, "--tasks[{i}]" if len(specs) > 1 else "--tasks")
    manifest = checkpoint.read_manifest(path)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    layout.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tasks-", dir=layout.scratch) as tmp:
        out = export.export(path, Path(tmp) / Path(path).resolve().name, layout)
        results = tasks.score(out, device, limit, batch_size)
    row, why = _this_runs(Path(path), manifest, layout)
    if row is not None:
        task_results.record(layout.tasks_record, Path(path).resolve().name, row, results)
        write_derived(read_records(layout.train_log), layout.metrics)
    return {"checkpoint": Path(path).resolve().name, "step": manifest.step, "tasks": results,
            "kept": layout.rel(layout.tasks_record) if row is not None else None, "why": why}


def _this_runs(path: Path, manifest: Manifest, layout: Layout) -> tuple[dict | None, str | None]:
    """The step record of this run that the checkpoint at `path` was saved at, or None and why not."""
    if path.resolve().parent != layout.checkpoints.resolve():
        return None, f"not under {layout.rel(layout.checkpoints)}: not one of this run's checkpoints"
    step = manifest.step
    row = next((r for r in read_records(layout.train_log) if r["step"] == step), None)
    if row is None:
        return None, f"{layout.rel(layout.train_log)} holds no record of step {step}"
    if manifest.eval and row.get("eval") and evaluate.as_row(manifest.eval) != row["eval"]:
        return None, f"its held-out eval differs from step {step}'s in {layout.rel(layout.train_log)}: another run's"
    return row, None
