"""W&B: one run per timeline of the run's steps, offline (files under <log.dir>/wandb/) or online.

Contract: W&B keeps the first value it gets for a step and cannot drop steps (its rewind is a
private preview), and what a killed process had sent is unknown. So `open` resumes the run on
record only when it was closed cleanly at a step <= `step` (a run ended and continued, or raised
train.steps), and sends the rows past that step; otherwise (after a kill, or a rollback past
what it holds) it starts a new run with the same name, config `supersedes: <the old id>`, and
sends every row from train.jsonl: the newest run of that name is the run, step for step. State
on record: the run id and the step it was closed at (None while it is open).
"""

from __future__ import annotations

from pathlib import Path

from shardline.core.config import Log as LogSection


class WandB:
    def __init__(self, root: Path, run_name: str, cfg: LogSection):
        self.root, self.name, self.cfg = Path(root), run_name, cfg
        self.run, self.id, self.last = None, None, 0

    def open(self, prior: dict | None, step: int, rows: list, config: dict, tags: dict) -> dict:
        import wandb
        from wandb.sdk.lib.runid import generate_id

        prior = prior or {}
        closed = prior.get("closed_at")
        same = bool(prior.get("run_id")) and closed is not None and closed <= step
        self.id = prior["run_id"] if same else generate_id()
        self.last = closed if same else 0
        self.root.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                  x_disable_meta=True)  # the lineage says which code; no system sampling
        self.run = wandb.init(project=self.cfg.project, entity=self.cfg.wandb_entity, name=self.name, id=self.id,
                              dir=str(self.root), mode=self.cfg.wandb_mode, resume="allow" if same else "never",
                              config={**config, "supersedes": None if same else prior.get("run_id")},
                              tags=[f"{k}:{v}" for k, v in tags.items()], settings=settings)
        if same:
            self.run.config.update(config, allow_val_change=True)  # the parent checkpoint moved on
        self.log([r for r in rows if r[0] > self.last])
        return {"run_id": self.id, "closed_at": None}

    def log(self, batch: list) -> None:
        for s, metrics in batch:
            self.run.log(metrics, step=s)
            self.last = s

    def flush(self) -> dict:
        return {"run_id": self.id, "closed_at": None}  # only a finished run says what it holds

    def close(self) -> dict:
        self.run.finish()
        return {"run_id": self.id, "closed_at": self.last}
