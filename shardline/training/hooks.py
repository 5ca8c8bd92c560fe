"""What happens around a training step, as hooks (torchtitan's trainer parts, Lightning's callbacks).

Contract:
- A hook may define `before_step(step)` (the step about to be taken, 1-based), `after_step(result,
  record)` (`result`: the step's shardline.training.step.StepResult; `record`: a `StepRecord`, what
  the hooks before it found about the step, its held-out eval, which the records hook writes) and
  `close(ok)`. Each built-in hook is handed the parts it uses, never the whole session. The loop calls them in list order; `close` in reverse order, once, on every way
  out of the loop: `ok` is True at the target step, False when the guard stopped it (a rollback
  follows). So the checkpointer is waited for before anything else closes, and the trackers,
  which hold what the records wrote, close last.
- `hooks_for(session, ...)` is the default list, in the order the step's work must happen:
  evaluation (held-out, then eval.tasks at their checkpoints; outside the training RNG), records
  (train.jsonl through the monitor, then the trackers), the profiler, progress (chaos points and
  the orchestrator's `on_step`: a kill there leaves the step recorded, not checkpointed) and the
  checkpointer (save at train.checkpoint_every and the target step; at the end, retention and the
  kept links; the checkpointer advances the lineage itself).
- `extra` hooks (a RunContext's `hooks`, or a caller of `train`) run after these and before the
  checkpointer's close.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from typing import Callable, Protocol

from shardline.core import chaos
from shardline.training.downstream import Downstream
from shardline.training.evaluate import as_row, compact, due
from shardline.training.step import StepResult


@dataclass
class StepRecord:
    """What the hooks found about a step, for the hooks after them (Lightning's `outputs`, typed)."""

    eval: dict | None = None  # the held-out eval (and eval.tasks) at this step, compact; None: not due


class Hook(Protocol):
    def before_step(self, step: int) -> None: ...

    def after_step(self, result: StepResult, record: StepRecord) -> None: ...

    def close(self, ok: bool) -> None: ...


class Base:
    """A hook that does nothing: subclasses define what they need."""

    def before_step(self, step: int) -> None:
        pass

    def after_step(self, result: StepResult, record: StepRecord) -> None:
        pass

    def close(self, ok: bool) -> None:
        pass


class Evaluation(Base):
    """Held-out eval at eval.every, every checkpoint and the target; eval.tasks join it."""

    def __init__(self, evaluate: Callable[[], dict] | None, is_due: Callable[[int], bool], downstream: Downstream,
                 target: int):
        self.evaluate, self.is_due, self.downstream, self.target = evaluate, is_due, downstream, target

    def after_step(self, result: StepResult, record: StepRecord) -> None:
        step = result.step
        ev = compact(self.evaluate()) if self.evaluate is not None and self.is_due(step) else None
        record.eval = self.downstream.at(step, self.target, ev) or None


class Records(Base):
    """The step's record: train.jsonl (the monitor) and the trackers (log.backends)."""

    def __init__(self, monitor, trackers, pending: list[dict]):
        self.monitor, self.trackers = monitor, trackers
        self.pending = pending  # rollbacks this timeline has not recorded yet: the first record holds them

    def after_step(self, r: StepResult, record: StepRecord) -> None:
        extra = {"batches": r.batches, "grad_norm": r.grad_norm,
                 **({"guard": r.verdict} if r.verdict != "ok" else {}),
                 **({"skipped_batches": r.skipped} if r.skipped else {}),
                 **({"rollbacks": self.pending} if self.pending else {}),
                 **({"eval": as_row(record.eval)} if record.eval else {})}
        self.pending = []
        self.trackers.step(self.monitor.step(r.step, loss=r.loss, lr=r.lr, data_wait_s=r.data_wait_s,
                                             compute_s=r.step_s - r.data_wait_s, step_s=r.step_s, extra=extra))

    def close(self, ok: bool) -> None:
        self.monitor.close()
        self.trackers.close()  # after a rollback, what they hold past its step is dropped as they reopen


class Profiler(Base):
    """train.profile: a trace of the steps it names."""

    def __init__(self, profiler, state):
        self.profiler, self.state = profiler, state

    def before_step(self, step: int) -> None:
        self.profiler.before(step)

    def after_step(self, r: StepResult, record: StepRecord) -> None:
        self.profiler.after(r.step)

    def close(self, ok: bool) -> None:
        self.profiler.after(self.state.step, end=True)


class Progress(Base):
    """Chaos points (tests kill here) and the orchestrator's progress callback."""

    def __init__(self, rank: int, on_step: Callable[[int, int], None] | None, target: int):
        self.rank, self.on_step, self.target = rank, on_step, target

    def after_step(self, r: StepResult, record: StepRecord) -> None:
        chaos.done("train", f"step {r.step} rank {self.rank}")
        chaos.point("train.step", f"{r.step}:rank{self.rank}")  # e.g. train.step@3:rank1 kills one rank
        if self.on_step:
            self.on_step(r.step, self.target)


class Checkpoints(Base):
    """Save at train.checkpoint_every and the target step (the checkpointer advances the lineage);
    at the end, retention and the kept links."""

    def __init__(self, session):
        s = session
        self.checkpointer, self.trackers, self.dist, self.guards = s.checkpointer, s.trackers, s.dist, s.guards
        self.every, self.target, self.after_save, self.retain = s.params.train.checkpoint_every, s.target, \
            s.after_save, s.retain
        self.links = s.kept if s.ctx.recorded and s.dist.rank == 0 else None  # removed at the end: DVC records them
        self.saved: list[str] = []

    def _held_back(self) -> int | None:  # inside a run of flagged steps, what a rollback would return to stays
        return self.guards.run[0]["step"] if self.guards.run else None

    def after_step(self, r: StepResult, record: StepRecord) -> None:
        if r.step % self.every and r.step != self.target:
            return
        path = self.checkpointer.save(r.step, record.eval,
                                      then=functools.partial(self.after_save, before=self._held_back()))
        self.trackers.flush()
        if path is not None:
            self.saved.append(path.name)
        self.dist.barrier()

    def close(self, ok: bool) -> None:
        self.checkpointer.wait()  # the last checkpoint (or one of the trouble, then removed) is on disk first
        if not ok:
            return
        if self.dist.rank == 0:  # a run killed inside its last retention, resumed with nothing to train, finishes it here
            self.retain(self._held_back())
        if self.links is not None and self.links.exists():
            shutil.rmtree(self.links)  # the orchestrator records data/checkpoints now: the links are not needed
        self.dist.barrier()


def hooks_for(session, layout, extra: tuple = ()) -> tuple[list, Checkpoints]:
    """The default hooks, in the order a step's work happens (module docstring), then `extra`;
    and the checkpoints hook among them (what the run saved)."""
    s = session
    evaluation = Evaluation(s.evaluate if s.held is not None else None, lambda step: due(step, s.target, s.params),
                            Downstream.for_training(s.params, layout, s), s.target)  # checked before a step trains
    checkpoints = Checkpoints(s)
    return [evaluation, Records(s.monitor, s.trackers, s.pending), Profiler(s.profiler, s.state),
            Progress(s.dist.rank, s.ctx.on_step, s.target), *extra, checkpoints], checkpoints


def close(hooks: list, ok: bool) -> None:
    """The one way out of the loop: every hook's close, in reverse order."""
    for h in reversed(hooks):
        h.close(ok)
