"""Training guards: a non-finite step never reaches the weights; spikes and runs of them roll back.

Contract:
- `Guard.judge(step, loss, finite, batches)` is called once per optimizer step, before the
  update, with values every rank shares (the all-reduced loss; `finite` all-reduced over the
  ranks' loss and gradient norm), so every rank takes the same decision. It returns "ok"
  (apply the update), "skip" (non-finite: no update, counted) or "spike" (finite and applied,
  but flagged); it raises `Trouble` when the run of flagged steps ending here holds
  train.spike_patience spikes or train.max_skipped skipped steps.
- A spike is a loss above train.spike_factor x the median of the last train.spike_window good
  (unflagged) steps, judged once that window is full. One good step ends a run.
- The ledger, rollbacks.json beside the checkpoints (data/checkpoints/, or train.checkpoint_uri's
  store: shardline.training.storage), lists every rollback of this run in order:
  its number `n`, `reason`, the flagged `steps` [first, last], the global `batches` consumed in
  them, the step rolled back `to` (the newest valid checkpoint before the first flagged step,
  or 0: the start), and the losses seen. It is written (atomically) before anything else
  happens, so a kill at any point after the decision resumes as the rollback would have.
- Replaying, the trainer skips each entry's batches (the loader moves past them) when it is
  about to run the entry's first step: `skips_before(step)`. Every checkpoint's lineage holds
  the ledger it was saved with; one saved with fewer entries than the ledger at a step inside
  or past a later entry's window is from the abandoned timeline (`tainted`) and is removed.
- `state_dict()` holds what a resume needs and cannot derive: the rolling window of good losses,
  the run of flagged steps in progress, and the count of skipped steps.
"""

from __future__ import annotations

import statistics
from collections import deque
from pathlib import Path

from shardline.core import chaos
from shardline.training import storage
from shardline.core.config import Train
from shardline.core.errors import BadInput, ShardlineError
from shardline.core.filenames import ROLLBACKS, step_dirs, step_of

Where = storage.Store | Path  # the checkpoints: a store, or a folder of them


class Trouble(Exception):
    """The run of flagged steps ending at this step calls for a rollback."""

    def __init__(self, reason: str, run: list[dict]):
        super().__init__(reason)
        self.reason, self.run = reason, run


class RolledBack(Exception):
    """The ledger has a new entry: train again from the newest checkpoint it leaves valid."""


class Diverged(ShardlineError):
    """Trouble again after train.max_rollbacks rollbacks: the message names steps and batches."""


def read_ledger(ckpts: Where) -> list[dict]:
    """The ledger: rollbacks.json, or the longer list a checkpoint's lineage holds (the file lost,
    or checkpoints restored from elsewhere): entries only ever append, so the longest is the truth."""
    store = storage.of(ckpts)
    try:
        ledger = store.read_json(store.root, ROLLBACKS)
    except FileNotFoundError:
        ledger = {"rollbacks": []}
    except ValueError:  # cut short or damaged: its entries cannot be told, and a lost one would retrain them
        ledger = None
    if not isinstance(ledger, dict) or not isinstance(ledger.get("rollbacks"), list):
        raise BadInput(f"{store.root}/{ROLLBACKS}: not a rollback ledger (truncated or damaged); restore it "
                       "('dvc checkout data/checkpoints', or from a copy), or delete it if no rollback happened "
                       "after the newest checkpoint (each checkpoint's lineage holds the ledger up to its step)")
    found = [ledger["rollbacks"]]
    found += [_recorded(store, p) or [] for p in store.step_dirs()]
    return max(found, key=len)


def write_ledger(ckpts: Where, ledger: list[dict]) -> None:
    storage.of(ckpts).write_json(ROLLBACKS, {"rollbacks": ledger})


def tainted(step: int, known: int, ledger: list[dict]) -> bool:
    """Whether a checkpoint at `step`, saved when the ledger held `known` entries, is from a
    timeline a later rollback abandoned."""
    return any(e["n"] > known and step >= e["steps"][0] for e in ledger)


def _recorded(store: storage.Store, path) -> list[dict] | None:
    """The ledger the checkpoint at `path` was saved with (None: no readable manifest)."""
    try:
        return list(store.manifest(path).lineage.rollbacks)
    except (OSError, ValueError, BadInput):  # verify, which judges every checkpoint, says why
        return None


def _known(store: storage.Store, path) -> int | None:
    """How many ledger entries the checkpoint at `path` was saved with (None: no readable manifest)."""
    got = _recorded(store, path)
    return None if got is None else len(got)


def drop_tainted(ckpts: Where, ledger: list[dict], kept: Path, log, first: int | None = None) -> None:
    """Remove the checkpoints (and their kept links) a rollback abandoned; with `first`, also
    every one from that step on (the trouble training stops at: none of it is kept)."""
    if not ledger and first is None:
        return
    store, links = storage.of(ckpts), storage.Local(kept)
    # manifests only (no hashing at every start); the kept links apart, so a kill between the two
    # removals leaves nothing behind
    for where, path in [(store, p) for p in store.step_dirs()] + [(links, p) for p in step_dirs(kept)]:
        known, step = _known(where, path), step_of(path)
        if known is None:
            continue
        if tainted(step, known, ledger) or (first is not None and step >= first):
            where.remove(path)
            if where is store:
                log(f"train: removed {path.name}: saved {'after' if first is None else 'in'} the trouble "
                    f"{'a rollback undid' if first is None else 'training stops at'}")


def base_step(ckpts: Where, first: int, ledger: list[dict]) -> int:
    """The step a rollback of trouble starting at `first` returns to: the newest valid checkpoint
    before it that no earlier rollback abandoned, or 0 (the start)."""
    store = storage.of(ckpts)
    older = [p for p in store.step_dirs() if step_of(p) < first]
    for path in sorted(older, reverse=True):  # newest first: hash only until one verifies
        step = step_of(path)
        if not tainted(step, _known(store, path) or 0, ledger) and store.verify(path, cached=True)[0]:
            return step
    return 0


def skips_before(step: int, ledger: list[dict]) -> list[dict]:
    """The entries whose batches are skipped before step `step + 1` runs, in ledger order."""
    return [e for e in ledger if e["steps"][0] == step + 1]


def entry(n: int, trouble: Trouble, to_step: int) -> dict:
    run = trouble.run
    return {"n": n, "reason": trouble.reason, "steps": [run[0]["step"], run[-1]["step"]], "to": to_step,
            "batches": [b for r in run for b in r["batches"]], "losses": [r["loss"] for r in run]}


def describe(e: dict) -> str:
    first, last = e["steps"]
    return (f"rollback {e['n']}: {e['reason']} at step(s) {first}-{last}; rolled back from step {last} to "
            f"{'the start' if not e['to'] else 'step ' + str(e['to'])}, skipping {len(e['batches'])} batch(es) "
            f"({', '.join(e['batches'])})")


def diverged(trouble: Trouble, ledger: list[dict], cfg: Train, ckpts: Where, counted: int) -> Diverged:
    run = trouble.run
    past = "".join(f"\n  {describe(e)}" for e in ledger)
    newest = storage.of(ckpts).latest_valid(lambda _: None)
    return Diverged(
        f"train: {trouble.reason} at step(s) {run[0]['step']}-{run[-1]['step']} (batches "
        f"{', '.join(b for r in run for b in r['batches'])}), after {counted} rollback(s) on this data version "
        f"(train.max_rollbacks {cfg.max_rollbacks}):{past or ' none allowed'}\nThe newest checkpoint is "
        f"{newest.name if newest else 'none'}, from before the trouble. Look at those batches "
        "(data/metrics/train.jsonl has every step's loss, gradient norm and batches), lower train.lr or raise "
        "train.warmup_steps, or raise train.max_rollbacks to let it skip more data")


class Guard:
    def __init__(self, cfg: Train):
        self.cfg = cfg
        self.good: deque[float] = deque(maxlen=cfg.spike_window)
        self.run: list[dict] = []  # the flagged steps in a row so far: step, kind, loss, batches
        self.skipped = 0

    def judge(self, step: int, loss: float, finite: bool, batches: list[str]) -> str:
        cfg = self.cfg
        if not finite:
            verdict = "skip"
            self.skipped += 1
        elif len(self.good) == cfg.spike_window and loss > cfg.spike_factor * statistics.median(self.good):
            verdict = "spike"
        else:
            self.good.append(loss)
            self.run = []
            return "ok"
        self.run.append({"step": step, "kind": verdict, "loss": loss if finite else None, "batches": batches})
        spikes = sum(r["kind"] == "spike" for r in self.run)
        skips = len(self.run) - spikes
        if spikes >= cfg.spike_patience:
            raise Trouble(f"loss spike ({spikes} steps above train.spike_factor {cfg.spike_factor} x the rolling "
                          f"median {statistics.median(self.good):.4f})", self.run)
        if skips >= cfg.max_skipped:
            raise Trouble(f"{skips} non-finite steps in a row (train.max_skipped {cfg.max_skipped})", self.run)
        return verdict

    def median(self) -> float | None:
        return statistics.median(self.good) if self.good else None

    def state_dict(self) -> dict:
        return {"good": list(self.good), "run": list(self.run), "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.good.clear()
        self.good.extend(state["good"][-self.cfg.spike_window:])
        self.run, self.skipped = list(state["run"]), state["skipped"]


def roll_back(t: Trouble, ckpts: Where, kept: Path, ledger: list[dict], cfg: Train, *, since: int, rank: int,
              barrier, log) -> None:
    """Record the rollback in the ledger and raise RolledBack; past train.max_rollbacks (counted
    since step `since`, this data version's start), raise Diverged instead. Every rank calls it
    at the same step (the decision is shared); rank 0 writes."""
    first, counted = t.run[0]["step"], sum(e["steps"][0] > since for e in ledger)
    if counted >= cfg.max_rollbacks:
        if rank == 0:  # a re-run replays to the same stop, from before the trouble
            drop_tainted(ckpts, ledger, kept, log, first=first)
        barrier()
        raise diverged(t, ledger, cfg, ckpts, counted)
    if rank == 0:
        e = entry(len(ledger) + 1, t, base_step(ckpts, first, ledger))
        write_ledger(ckpts, ledger + [e])
        log(f"train: {describe(e)}")
    chaos.point("train.rollback")
    barrier()  # the ledger is durable before any rank reads it again
    raise RolledBack
