"""What only the orchestrator knows about a run: one `RunContext`, built once per stage run by the
orchestration layer (shardline.orchestration.tasks.invoke.run_context, for the `shardline` command and the Prefect flows
alike) and handed down to the stage.

Contract: the engine reads it and never calls back up. Where a stage runs (here, or its parts on a
task runner) is decided by the orchestrator before the stage is called; the engine receives only
the outcome of that decision (`mapper`). Every field has a default that means "a plain run in a
folder, nothing watching": `RunContext()` is what a test or a script passes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class RunContext:
    log: Callable[[str], None] = print
    """Where the stage's lines go (stdout, a Prefect run logger)."""
    mapper: Callable | None = None
    """How a parted stage maps its parts (None: the stage's own default pool)."""
    sink: Callable | None = None
    """Progress of a data stage, `sink(stage, fraction, detail)`; None: a terminal bar."""
    run_id: str | None = None
    """The orchestrator's id of this run (a Prefect flow run), recorded in the lineage."""
    run_name: str | None = None
    """The orchestrator's name of this run (a DVC experiment's), the trackers' run name."""
    shards_md5: str | None = None
    """The data version: the md5 DVC records for data/shards, recorded in the lineage."""
    on_step: Callable[[int, int], None] | None = None
    """Training progress, `on_step(step, target)`."""
    new_run: bool = False
    """The orchestrator starts a new experiment: a changed identity trains a fresh model."""
    recoverable: Callable[[Path], bool] | None = None
    """Whether a checkpoint directory is kept elsewhere (DVC's cache), so it may be removed."""
    recorded: bool = False
    """The orchestrator records data/checkpoints as the run ends (DVC's commit)."""
    not_code: tuple[str, ...] = ()
    """What the orchestrator writes in the git work tree as it runs (DVC's dvc.lock, ...), as git
    pathspec globs from the project root: not code, so the lineage's `dirty` ignores it."""
    parent: object | None = None
    """report: the run this one is compared with (shardline.results.runs.Run): a `dvc exp run`'s
    baseline, whose outputs DVC's cache holds; None: none."""
    hooks: tuple = ()
    """Training hooks of the caller's own (shardline.training.hooks: before_step, after_step, close),
    run after the built-in ones each step; rank 0's only, as the rest of this context."""

    def quiet(self) -> "RunContext":
        """The context of a rank other than 0: nothing logged, no progress."""
        return dataclasses.replace(self, log=lambda _: None, sink=None, on_step=None, hooks=())
