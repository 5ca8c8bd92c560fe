"""Where training stands, and getting back there from a checkpoint.

Contract: `resume(latest, changes, ...)` loads a verified checkpoint of either format into the
loader, model, optimizer, GradScaler and RNGs (full under fsdp: ranks > 0 get model and
optimizer broadcast by rank 0; sharded: DCP reshards onto this job's ranks) and returns a `Position`: the counters the checkpoint holds (step, tokens seen, resumes, the
step this data version began at, the rollback-ledger entries it knew, the guards' state) plus
what changed at this resume. `changes` (allowed identity changes) make this step the new data
version's start and record the parent's eval, the "before" of a before/after. A start after a
rollback (`rolled_back`) is not counted as a resume: nothing crashed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from shardline.training import rng
from shardline.training import checkpoint, sharded
from shardline.training.dist import Dist
from shardline.stream.loader import Loader


@dataclass
class Position:
    """Where training stands: counters from the checkpoint, plus what changed at this resume."""

    step: int = 0
    tokens_seen: int = 0
    resumes: int = 0
    version_start: int = 0  # the step this data version's training began at
    parent: str | None = None
    changed: list[str] = field(default_factory=list)
    continued_from: dict | None = None  # this identity's training continued from a checkpoint of another
    known: int = 0  # rollback-ledger entries the checkpoint was saved with
    guard: dict | None = None  # the guards' state (shardline.training.guard)
    init: dict | None = None  # train.init_from as the run's first checkpoint recorded it (lineage)


def resume(latest: Path, changes: list[str], loader: Loader, dist: Dist, model, opt, scaler,
           rolled_back: bool) -> Position:
    # fsdp ranks > 0 get the model and optimizer broadcast by rank 0: not a full copy in each one's memory
    skip = () if dist.holds_full_state else ("model.pt", "optimizer.pt")
    tensors, state, manifest = checkpoint.load(latest, skip=skip)
    loader.load_state_dict(state["loader"], allow_change=bool(changes))
    if manifest.get("format") == "sharded":  # every rank reads the chunks its own shards need
        sharded.load_into(latest, model, opt, dist.world)
    else:
        dist.load_full_state(model, opt, tensors.get("model.pt"), tensors.get("optimizer.pt"))
    scaler.load_state_dict(tensors["scaler.pt"])
    rng.restore(tensors["rng.pt"])
    step, lin = state["step"], manifest["lineage"]
    origin = lin.get("continued_from")
    if changes:  # before/after attribution: the parent as it was, and (below) on the new held-out set
        origin = {"checkpoint": latest.name, "step": step, "data_version": lin["data_version"], "mix": lin["mix"],
                  "changes": changes, "eval": manifest.get("eval"), "eval_now": None}
    return Position(step, state["tokens_seen"], state.get("resumes", 0) + (not rolled_back),  # not a crash
                    step if changes else state.get("version_start_step", 0), latest.name, changes, origin,
                    len(lin.get("rollbacks") or []), state.get("guard"), lin.get("init"))
