"""MLflow: one run in experiment `log.project`, in a local sqlite store (<log.dir>/mlflow.db) or
at log.mlflow_uri.

Contract: MLflow keeps every value logged for a step and cannot delete one, but it can be asked
what it holds. So `open` reads, per metric, the last step the run on record holds: all at or
before `step`, it resumes that run and sends each metric's rows past it; any past `step` (a kill
or a rollback after it had them), it deletes that run (MLflow's soft delete: restorable, hidden
from the UI), starts a new one of the same name tagged `shardline.supersedes`, and sends every row
from train.jsonl. Every send is synchronous (log_batch), so what returned is held: state on
record is the run id. The identity goes in as params (once, when the run starts) and tags (each
start: the parent checkpoint and the code move on). A kill may land anywhere in `open`, so: the
local store appears whole or not at all (made under a temp name, linked into place), and each run
is tagged `shardline.state` with the run's identity; `open` deletes any other active run of that
identity (one a killed `open` created but never recorded).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from shardline.core import fsio
from shardline.core.config import Log as LogSection
from shardline.core.filenames import MLFLOW_ARTIFACTS, MLFLOW_DB

BATCH = 1000  # MLflow's limit of metrics per log_batch


def _flat(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)[:6000]  # MLflow's longest param value
    return out


def _new_store(db: Path, artifacts: str) -> None:
    """MLflow migrates a new sqlite store in dozens of steps (seconds of CPU, longer at the trackers'
    idle priority), not one transaction: a kill among them leaves a store every later open fails
    on ("table ... already exists"). So they run on a temp file, linked into place when done."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for old in db.parent.iterdir():  # what a process killed while making one left
        if old.name.startswith(f".{db.name}{fsio.TMP_MARK}"):
            old.unlink(missing_ok=True)
    tmp = fsio.temp_name(db)
    SqlAlchemyStore(f"sqlite:///{tmp}", artifacts).engine.dispose()
    with contextlib.suppress(FileExistsError):  # link, not replace: never over a store another made meanwhile
        os.link(tmp, db)
        fsio.fsync_dir(db.parent)
    tmp.unlink()


class MLflow:
    def __init__(self, root: Path, run_name: str, cfg: LogSection, key: str):
        self.root, self.name, self.cfg, self.key = Path(root), run_name, cfg, key
        self.client, self.id = None, None

    def open(self, prior: dict | None, step: int, rows: list, config: dict, tags: dict) -> dict:
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        self.root.mkdir(parents=True, exist_ok=True)
        for name in ("mlflow.store.db.utils", "alembic"):  # a new store's table setup is not the run's news
            logging.getLogger(name).setLevel(logging.WARNING)
        db = (self.root / MLFLOW_DB).resolve()
        if not self.cfg.mlflow_uri and not db.exists():
            _new_store(db, (self.root / MLFLOW_ARTIFACTS).resolve().as_uri())
        uri = self.cfg.mlflow_uri or f"sqlite:///{db}"
        c = self.client = MlflowClient(tracking_uri=uri)
        exp = c.get_experiment_by_name(self.cfg.project)
        # its artifacts beside the store, not in ./mlruns of whatever folder training runs in
        exp_id = exp.experiment_id if exp else c.create_experiment(
            self.cfg.project, artifact_location=(self.root / MLFLOW_ARTIFACTS).resolve().as_uri())
        old, held = (prior or {}).get("run_id"), None
        if old:
            try:
                run = c.get_run(old)
            except MlflowException:
                run = None
            if run is not None and run.info.lifecycle_stage == "active":
                held = {k: max(m.step for m in c.get_metric_history(old, k)) for k in run.data.metrics}
                if any(s > step for s in held.values()):
                    c.delete_run(old)
                    held = None
        scalars = {f"shardline.{k}": str(v)[:8000] for k, v in config.items() if not isinstance(v, dict)}
        if held is None:
            params = {k: config[k] for k in ("model", "train", "loader", "tokenizer", "mix", "clean_rules")}
            new_tags = {**scalars, **{f"shardline.tag.{k}": v for k, v in tags.items()},
                        "shardline.supersedes": str(old), "shardline.state": self.key}
            self.id = c.create_run(exp_id, run_name=self.name, tags=new_tags).info.run_id
            items = list(_flat(params).items())
            for i in range(0, len(items), 100):  # MLflow's limit of params per log_batch
                c.log_batch(self.id, params=[Param(k, v) for k, v in items[i:i + 100]])
            held = {}
        else:
            self.id = old
            c.update_run(self.id, status="RUNNING")
            for k, v in scalars.items():
                c.set_tag(self.id, k, v)
            c.set_tag(self.id, "shardline.state", self.key)
        for r in c.search_runs([exp_id], filter_string=f"tags.`shardline.state` = '{self.key}'"):  # active only
            if r.info.run_id != self.id:
                c.delete_run(r.info.run_id)
        self.log([(s, {k: v for k, v in m.items() if s > held.get(k, 0)}) for s, m in rows])
        return {"run_id": self.id}

    def log(self, batch: list) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, s) for s, m in batch for k, v in m.items()]
        for i in range(0, len(metrics), BATCH):
            self.client.log_batch(self.id, metrics=metrics[i:i + BATCH])

    def flush(self) -> dict:
        return {"run_id": self.id}

    def close(self) -> dict:
        self.client.set_terminated(self.id, "FINISHED")
        return {"run_id": self.id}
