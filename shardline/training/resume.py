"""Where a run starts, and getting back to where a checkpoint left off.

Contract:
- `find_start(...)` names the checkpoint a run starts from: the newest valid one in the run's
  store (shardline.training.storage: data/checkpoints or train.checkpoint_uri), unless its
  identity (shardline.training.identity) differs and that is refused, or calls for a fresh model
  (the old checkpoints are then set aside first). Rank 0 first sweeps what a killed save left.
- `resume(checkpointer, latest, changes, rolled_back)` loads a verified checkpoint of either
  format into the checkpointer's stateful parts (shardline.training.checkpointer: model,
  optimizer, GradScaler, RNGs, loader, guards, the train counters) and returns the `Origin`: what
  this run's lineage continues. `changes` (allowed identity changes) let the loader continue at
  its position on the changed data, start the guards afresh (the old rolling median judged
  other text), make this step the new data version's start, and record the parent's eval, the
  "before" of a before/after. A start after a rollback (`rolled_back`) is not counted as a
  resume: nothing crashed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from shardline.context import RunContext
from shardline.core.config import Params
from shardline.core.layout import Layout
from shardline.core.filenames import TRAIN_STATE
from shardline.stream.loader import Loader
from shardline.training import guard, identity, storage
from shardline.training.checkpointer import TRAIN, Checkpointer
from shardline.training.dist import Dist
from shardline.training.records import Init


@dataclass
class Origin:
    """What this run continues: the checkpoint, and what changed at this resume."""

    parent: str | None = None
    changed: list[str] = field(default_factory=list)
    continued_from: dict | None = None  # this identity's training continued from a checkpoint of another
    known: int = 0  # rollback-ledger entries the checkpoint was saved with
    init: Init | None = None  # train.init_from as the run's first checkpoint recorded it (lineage)


class _Changed:
    """The loader, taking a saved position whose invariants changed (allowed: identity.decide)."""

    def __init__(self, loader: Loader):
        self.loader = loader

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state, allow_change=True)


def resume(checkpointer: Checkpointer, latest: Path, changes: list[str], rolled_back: bool) -> Origin:
    parts = dict(checkpointer.parts)
    if changes:
        parts["loader"] = _Changed(parts["loader"])
        del parts["guard"]  # on new data, a fresh rolling median
    manifest = checkpointer.load(latest, parts)
    train = parts[TRAIN]
    train.resumes += not rolled_back  # not a crash
    if changes:
        train.version_start = train.step
    lin = manifest.lineage
    origin = lin.continued_from
    if changes:  # before/after attribution: the parent as it was, and (in train) on the new held-out set
        origin = {"checkpoint": latest.name, "step": train.step, "data_version": lin.data_version.to_json(),
                  "mix": lin.mix, "changes": changes, "eval": manifest.eval, "eval_now": None,
                  "heldout": lin.heldout}  # the parent's held-out set: the card says when this run's differs
    return Origin(latest.name, changes, origin, len(lin.rollbacks), lin.init)


def find_start(params: Params, layout: Layout, store: storage.Store, ctx: RunContext, dist: Dist, ident: dict,
               kept: Path) -> tuple[Path | None, list[str], list[dict]]:
    """(the checkpoint to resume from or None, the identity changes allowed at it, the rollback
    ledger); every rank calls it. Rank 0 first sweeps what a kill or a rollback left, and sets
    aside the checkpoints of another identity when that starts a fresh model."""
    cfg, log = params.train, ctx.log
    ledger = dist.share(guard.read_ledger(store) if dist.rank == 0 else None)
    if dist.rank == 0:
        store.check()
        store.sweep(log)
        guard.drop_tainted(store, ledger, kept, log)
        store.tidy_kept(layout.kept, ctx.recoverable, log)
    dist.barrier()
    latest = dist.share(store.latest_valid(log) if dist.rank == 0 else None)  # hashed once, not per rank
    if latest is None:
        return None, [], ledger
    # verified: its JSON is what the tensors were saved with
    old = identity.saved(store.read_json(latest, TRAIN_STATE), store.manifest(latest).lineage)
    changes = identity.diff(old, ident)
    action = identity.decide(changes, latest.name, allow=cfg.allow_data_change,
                             fresh=cfg.fresh_on_data_change or ctx.new_run)
    if action != "fresh":
        return latest, changes, ledger
    why = "new experiment" if ctx.new_run else "train.fresh_on_data_change"
    if isinstance(store, storage.Bucket):  # every rank refuses: none waits at the barrier below for rank 0
        raise store.no_archive(f"a new run ({why}): {'; '.join(changes)}")
    dist.barrier()  # every rank has read `latest` before rank 0 moves it
    if dist.rank == 0:
        log(f"train: a new run ({why}): {'; '.join(changes)}")
        store.set_aside(old, ctx.recoverable, log)
    dist.barrier()
    return None, [], []
