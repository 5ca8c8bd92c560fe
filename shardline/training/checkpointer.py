"""The checkpointer: a dict of stateful parts saved and loaded in the format
train.checkpoint_format names, as torchtitan's CheckpointManager does.

Contract:
- `Checkpointer(cfg, dist, store, parts, lineage)`: `store` is where checkpoints live
  (shardline.training.storage: data/checkpoints, a folder, or train.checkpoint_uri's object
  store); `parts` maps a name to a stateful part
  (shardline.training.state: `state_dict()` / `load_state_dict()`). Where each lives in a
  checkpoint is fixed (the files every checkpoint so far has): "model" and "optimizer" in
  model.pt and optimizer.pt (full) or in dcp/ as "model" and "optim" (sharded); "scaler" and
  "rng" in scaler.pt and rng.pt; "train" is train_state.json's top level, and every other part
  (the loader, the guards) a key of it. `lineage` is what the next checkpoint records: the
  checkpointer owns its advance (each save it makes on rank 0 becomes the next one's parent).
- `format` is train.checkpoint_format; unset, "sharded" under fsdp with more than one process
  (no rank gathers the full state) and "full" otherwise.
- `save(step, eval, then)` is called by every rank at a checkpoint step. Training waits
  only for a copy: full: the gathered single-process state (the parts' `full_state_dict()`:
  under fsdp a collective, on rank 0 the whole model and optimizer); sharded: each rank's own
  shards. The writes run on each rank's saver thread:
  full: rank 0 writes the checkpoint (checkpoint.save);
  sharded: every rank writes and hashes its shards into the temp dir rank 0 named, or on a
  store into the prefix rank 0 cleared (shardline.training.sharded), the ranks' file lists are
  gathered to rank 0 on a gloo group
  of the checkpoint's own, and rank 0 writes scaler, RNG, state and the manifest last: a
  manifest exists only once every rank's files are durable. A rank whose write fails still
  joins the gather with its error, so rank 0 writes no manifest and names that rank at once.
  It returns the checkpoint's dir on rank 0 (None elsewhere); `then(path)` runs on rank 0's
  saver thread once the checkpoint is valid (retention, kept links).
- `load(path, parts)` loads a verified checkpoint of either format (the manifest's, not this
  run's) into `parts` (default: the checkpointer's own) and returns its manifest; every rank
  calls it. The train state's parts first, so a loader that refuses the state does so before
  any tensor is read; a part the checkpoint predates keeps its fresh state. Full under fsdp:
  ranks > 0 read no model or optimizer, rank 0's is broadcast; sharded: DCP reshards onto this
  job's ranks.
- `wait()` re-raises a background write's error, on every rank if any rank's failed; every rank
  calls it before it reports success (and `save` calls it first).
- `AsyncSaver` (under both) blocks training only for a copy of the state; the write (and
  retention) runs on a background thread. A kill before it finishes loses only that
  checkpoint: the previous one is still the newest valid.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

import torch

from shardline.core import chaos
from shardline.core.errors import ShardlineError
from shardline.core.config import Train
from shardline.core.filenames import CHECKPOINT_MODEL, CHECKPOINT_OPTIMIZER, CHECKPOINT_RNG, CHECKPOINT_SCALER
from shardline.training import sharded, storage
from shardline.training.dist import Dist
from shardline.training.records import Lineage, Manifest
from shardline.training.state import Stateful

FILES = {"model": CHECKPOINT_MODEL, "optimizer": CHECKPOINT_OPTIMIZER, "scaler": CHECKPOINT_SCALER,
         "rng": CHECKPOINT_RNG}
SHARDED = {"model": "model", "optimizer": "optim"}  # the parts DCP holds in a sharded checkpoint, by key there
TRAIN = "train"  # the part whose state is train_state.json's top level


class Checkpointer:
    def __init__(self, cfg: Train, dist: Dist, store: storage.Store | Path, parts: dict[str, Stateful],
                 lineage: Lineage | None = None):
        self.dist, self.store, self.parts, self.lineage = dist, storage.of(store), parts, lineage
        self.format = cfg.checkpoint_format or ("sharded" if dist.strategy == "fsdp" else "full")
        self.group = dist.side_group()  # every rank builds its Checkpointer at the same point: a collective
        self.saver = AsyncSaver()

    def _rank0(self) -> tuple[dict, dict]:
        """Rank 0's own files besides the model and optimizer (by file name), and the train state."""
        parts = self.parts
        tensors = {FILES[k]: p.state_dict() for k, p in parts.items() if k in FILES and k not in SHARDED}
        state = {**(parts[TRAIN].state_dict() if TRAIN in parts else {}),
                 **{k: p.state_dict() for k, p in parts.items() if k not in FILES and k != TRAIN}}
        return tensors, state

    def save(self, step: int, eval: dict | None, then: Callable[[Path], None]) -> Path | None:
        path = self._save(step, self.lineage, eval, then)
        if path is not None:
            self.lineage = self.lineage.after(path.name)  # a frozen record: the write in flight keeps its own
        return path

    def _save(self, step: int, lineage: Lineage, eval: dict | None, then: Callable[[Path], None]) -> Path | None:
        dist, store, parts = self.dist, self.store, self.parts
        held = [k for k in SHARDED if k in parts]
        self.wait()  # the previous save is over on every rank (or its failure raises on every rank)
        if self.format == "full":
            full = {FILES[k]: parts[k].full_state_dict() for k in held}  # every rank: a collective under fsdp
            if dist.rank != 0:
                return None
            tensors, state = self._rank0()
            return self.saver.submit(store, step, {**full, **tensors}, state, lineage, then=then, eval=eval)
        tmp = dist.share(store.staging(step) if dist.rank == 0 else None)
        local = snapshot({SHARDED[k]: parts[k].state_dict() for k in held})
        tensors, state, eval = frozen(*(self._rank0() if dist.rank == 0 else ({}, {})), eval)  # the lineage: a record
        group, rank, world = self.group, dist.rank, dist.world

        def work() -> None:
            if rank == 0:
                store.clear(tmp)
            if group is not None:
                torch.distributed.barrier(group=group)  # rank 0 has cleared the temp dir (the prefix)
            failed: Exception | None = None
            try:
                mine = sharded.write(tmp, local, rank, group, f"{step}:rank{rank}")
            except Exception as e:  # still joins the gather: rank 0 must not wait out dist_timeout_s for it
                mine, failed = None, e
            chaos.point("checkpoint.shard", f"{step}:rank{rank}")  # a rank dies after its write, before the gather
            own = failed is not None and not isinstance(failed, sharded.RankFailed)
            sent = (mine, f"{type(failed).__name__}: {failed}" if own else None)
            every = [sent] if group is None else [None] * world if rank == 0 else None
            if group is not None:
                torch.distributed.gather_object(sent, every, dst=0, group=group)
            if own:  # this rank's own error (an ENOSPC stays one line in the CLI)
                raise failed  # type: ignore[misc]
            bad = [(r, why) for r, (_, why) in enumerate(every or []) if why]
            if bad or failed is not None:  # rank 0 names the rank; another rank learnt it from DCP
                r, why = bad[0] if bad else (failed.rank, f"{type(failed.error).__name__}: {failed.error}")
                raise ShardlineError(f"checkpoint step {step}: rank {r} could not write its shards ({why}); "
                                     "the previous checkpoint stays the newest valid")
            if rank == 0:
                then(store.save(step, tensors, state, lineage, eval, shards=[m for m, _ in every]))

        self.saver.run(work, f"checkpoint-{step}")
        return store.step_path(step) if rank == 0 else None

    def load(self, path: Path, parts: dict[str, Stateful] | None = None) -> Manifest:
        dist, parts = self.dist, self.parts if parts is None else parts
        # fsdp ranks > 0 get the model and optimizer broadcast by rank 0: not a full copy in each one's memory
        skip = () if dist.holds_full_state else tuple(FILES[k] for k in SHARDED)
        tensors, state, manifest = self.store.load(path, skip=skip)
        for k, p in parts.items():
            if k == TRAIN:
                p.load_state_dict(state)
            elif k not in FILES and k in state:
                p.load_state_dict(state[k])
        held = {k: parts[k] for k in SHARDED if k in parts}
        if manifest.format == "sharded":  # every rank reads the chunks its own shards need
            sharded.load(path, {SHARDED[k]: p for k, p in held.items()}, dist.world)
        else:
            for k, p in held.items():  # model before optimizer: under fsdp each is a broadcast
                p.load_full_state_dict(tensors.get(FILES[k]))
        for k, p in parts.items():
            if k in FILES and k not in SHARDED:
                p.load_state_dict(tensors[FILES[k]])
        return manifest

    def wait(self) -> None:
        """Every rank calls it at the same points: a background failure on any rank raises on all
        of them here, not only on its own (whose peers would otherwise wait out dist_timeout_s)."""
        err = None
        try:
            self.saver.wait()
        except BaseException as e:
            err = e
        if self.group is not None:
            failed = torch.tensor([float(err is not None)])
            torch.distributed.all_reduce(failed, group=self.group)
            if err is None and failed.item():
                raise ShardlineError("checkpoint: another rank's checkpoint write failed (its log says why); the "
                                     "previous checkpoint stays the newest valid")
        if err is not None:
            raise err


def snapshot(obj: Any) -> Any:
    """A deep copy of every tensor in a nested state (on CPU), so training can go on mutating
    the originals while the copy is written."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(snapshot(v) for v in obj)
    return obj


def frozen(tensors: dict, *plain: Any) -> tuple:
    """What a background write reads, as of now: a snapshot of the tensors and a JSON round trip
    of each plain value (training goes on changing the originals)."""
    return (snapshot(tensors), *(json.loads(json.dumps(x)) for x in plain))


class AsyncSaver:
    """One checkpoint write at a time on a background thread; errors surface at the next call."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, store: storage.Store, step: int, tensors: dict, state: dict, lineage: Lineage,
               then: Callable[[Path], None] | None = None, eval: dict | None = None) -> Path:
        self.wait()
        # the lineage is a frozen record (the loop rebinds it for the next checkpoint), so the write
        # reads it as it is: copying it here would only lengthen the block training waits for
        snap, state, eval = frozen(tensors, state, eval)

        def work() -> None:
            path = store.save(step, snap, state, lineage, eval)
            if then:
                then(path)

        self.run(work, f"checkpoint-{step}")
        return store.step_path(step)

    def run(self, work: Callable[[], None], name: str) -> None:
        """Run `work` on the background thread (after the previous one); its error surfaces at `wait`."""
        self.wait()

        def guarded() -> None:
            try:
                work()
            except BaseException as e:  # re-raised in the training thread by wait()
                self._error = e

        self._thread = threading.Thread(target=guarded, name=name)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err
