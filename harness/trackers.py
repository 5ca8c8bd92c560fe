"""What each tracker holds, read back the way its own tools read it, offline: every series as
{name: {step: value}}, to hold against data/metrics/train.jsonl.

- `tensorboard(run_dir)`: tensorboard's EventAccumulator over the run's event files, purging what
  a later session's start discards (purge_orphaned_data, as TensorBoard's UI does).
- `wandb(log_dir, run_id)`: the run's offline `.wandb` files (one per process that resumed it),
  in the order they were written, parsed from W&B's record log format (a LevelDB-style log of
  `wandb_internal_pb2.Record`s: wandb 0.31 no longer ships a Python reader), later values of a
  step kept only where W&B keeps them: its first.
- `mlflow(uri, experiment)`: MLflow's client: the experiment's active runs, each metric's history.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK, HEADER = 32768, 7  # W&B's record log: 32 KiB blocks; records of crc32c, length, type


def tensorboard(run_dir: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=True)
    acc.Reload()
    out = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    return {tag: v for tag, v in out.items() if v}  # a tag whose every event was purged shows nothing


def _records(path: Path) -> list[bytes]:
    b = path.read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", b[:7])
    assert ident == b":W&B" and magic == 0xBEE1, f"{path}: not a W&B run file"
    pos, out, part = 7, [], b""
    while pos + HEADER <= len(b):
        left = BLOCK - pos % BLOCK
        _, n, kind = struct.unpack("<IHB", b[pos:pos + HEADER]) if left >= HEADER else (0, 0, 0)
        if left < HEADER or (kind == 0 and n == 0):  # the rest of a block is padding
            pos += left
            continue
        data, pos = b[pos + HEADER:pos + HEADER + n], pos + HEADER + n
        if kind == 1:
            out.append(data)
        elif kind == 2:
            part = data
        elif kind == 3:
            part += data
        elif kind == 4:
            out.append(part + data)
    return out


def wandb_runs(log_dir: Path) -> dict[str, dict]:
    """Every offline run under log_dir: id -> {name, config, history {key: {step: value}}}."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs: dict[str, dict] = {}
    for f in sorted(Path(log_dir).glob("wandb/offline-run-*/run-*.wandb")):  # the dir names start with the time
        run = None
        for data in _records(f):
            r = pb.Record()
            r.ParseFromString(data)
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run = runs.setdefault(r.run.run_id, {"name": r.run.display_name, "config": {}, "tags": list(r.run.tags),
                                                     "history": {}})
                run["config"].update({i.key: json.loads(i.value_json) for i in r.run.config.update})
            elif kind == "config" and run is not None:
                run["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
            elif kind == "history" and run is not None:
                step = r.history.step.num
                for i in r.history.item:
                    key = i.key or "/".join(i.nested_key)
                    if not key.startswith("_"):
                        run["history"].setdefault(key, {}).setdefault(step, json.loads(i.value_json))
    return runs


def mlflow(uri: str, experiment: str) -> dict[str, dict]:
    """The experiment's active runs: run name -> {id, tags, params, history {key: {step: value}}}."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    exp = c.get_experiment_by_name(experiment)
    out = {}
    for run in c.search_runs([exp.experiment_id]):
        hist: dict[str, dict[int, float]] = {}
        for k in run.data.metrics:
            for m in c.get_metric_history(run.info.run_id, k):
                assert m.step not in hist.setdefault(k, {}), f"MLflow holds two values of {k} at step {m.step}"
                hist[k][m.step] = m.value
        out[run.info.run_name] = {"id": run.info.run_id, "tags": run.data.tags, "params": run.data.params,
                                  "history": hist}
    return out
