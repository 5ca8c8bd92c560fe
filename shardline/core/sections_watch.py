"""params.yaml's sections for watching a run: `log` (the trackers a run also reports to) and
`train.profile` (a torch.profiler trace of chosen steps). Neither changes what is trained: both
stay out of a run's identity, so switching one on resumes the same run. `Params` and loading:
shardline.core.config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from shardline.core import plugins
from shardline.core.section_base import _Section

BACKENDS = ("tensorboard", "wandb", "mlflow")  # built in; a plug-in adds one through "shardline.trackers"


class Log(_Section):
    backends: tuple[str, ...] = ()
    """Trackers that get every step (loss, learning rate, gradient norm, tokens/s, MFU, data
    wait), every held-out eval per source (loss and bits per byte), the guards' skipped steps and
    rollbacks, and the run's lineage as config and tags: tensorboard, wandb, mlflow, or one a
    plug-in adds (docs/extending.md). Each built-in one is an optional extra
    (`pip install 'shardline[tensorboard]'`, `[wandb]`, `[mlflow]`); data/metrics/train.jsonl is kept
    whatever is listed. After a kill, resume or rollback each holds exactly one value per step,
    the same as train.jsonl."""
    dir: str = "logs"
    """Where the trackers write, relative to the project: TensorBoard's event files
    (`tensorboard --logdir logs/tensorboard`), W&B's run files, and MLflow's local store
    (logs/mlflow.db) unless mlflow_uri names another."""
    project: str = "shardline"
    """The W&B project and the MLflow experiment."""
    run_name: str | None = None
    """The run's name in every tracker. Unset: the DVC experiment's name under `dvc exp run`,
    else the project folder's name and the run's identity (e.g. `myproject-3f2a9c1e`)."""
    wandb_mode: Literal["offline", "online"] = "offline"
    """offline writes W&B's run files under `dir` (`wandb sync` uploads them later); online
    sends them as it trains (credentials from the environment: WANDB_API_KEY)."""
    wandb_entity: str | None = None
    """The W&B team or user the run belongs to (unset: the API key's default)."""
    mlflow_uri: str | None = None
    """The MLflow tracking URI (`http://host:5000`, `sqlite:///path.db`). Unset: a local store,
    sqlite at <dir>/mlflow.db (`mlflow ui --backend-store-uri sqlite:///logs/mlflow.db`)."""
    flush_s: float = Field(10.0, gt=0)
    """How often the trackers' files are flushed (and at every checkpoint): what a dashboard can
    show lags training by about this, given idle CPU for the trackers' process (it runs at the
    lowest priority)."""
    close_timeout_s: float = Field(30.0, gt=0)
    """At the end of a run (and before a rollback), how long to wait for the trackers still
    sending (a slow or gone server) before stopping their process; training's own outputs never
    wait on one."""

    @field_validator("backends")
    @classmethod
    def _once(cls, v: tuple) -> tuple:
        dupes = sorted({b for b in v if v.count(b) > 1})
        if dupes:
            raise ValueError(f"lists {', '.join(dupes)} twice")
        for b in v:
            if b not in BACKENDS and b not in plugins.names("trackers"):  # metadata read only then
                raise ValueError(plugins.unknown(b, "trackers", BACKENDS))
        return v


class Profile(_Section):
    start_step: int = Field(ge=1)
    """The first optimizer step profiled (as train.jsonl counts them, from 1)."""
    steps: int = Field(3, ge=1)
    """How many steps: the trace covers them whole (data wait, forward, backward, update)."""
    memory: bool = True
    """Also record tensor allocations (and, on a GPU, a CUDA memory snapshot for
    https://pytorch.org/memory_viz)."""
