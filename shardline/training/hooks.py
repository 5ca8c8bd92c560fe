"""What happens around a training step, as hooks (torchtitan's trainer parts, Lightning's callbacks).

Contract:
- A hook may define `before_step(step)` (the step about to be taken, 1-based), `after_step(result,
  out)` (`result`: the step's shardline.training.step.StepResult; `out`: the step's record so far,
  which a hook may add to: the held-out eval goes there, and the record hook writes it) and
  `close(ok)`. The loop calls them in list order; `close` in reverse order, once, on every way
  out of the loop: `ok` is True at the target step, False when the guard stopped it (a rollback
  follows). So the checkpointer is waited for before anything else closes, and the trackers,
  which hold what the records wrote, close last.
- `hooks_for(session, ...)` is the default list, in the order the step's work must happen:
  evaluation (held-out, then eval.tasks at their checkpoints; outside the training RNG), records
  (train.jsonl through the monitor, then the trackers), the profiler, progress (chaos points and
  the orchestrator's `on_step`: a kill there leaves the step recorded, not checkpointed) and the
  checkpointer (save at train.checkpoint_every and the target step; at the end, retention and the
  kept links).
- `extra` hooks (a RunContext's `hooks`, or a caller of `train`) run after these and before the
  checkpointer's close.
"""

from __future__ import annotations

import functools
import shutil
from typing import Protocol

from shardline.core import chaos
from shardline.training.downstream import Downstream
from shardline.training.evaluate import as_row, compact, due
from shardline.training.step import StepResult


class Hook(Protocol):
    def before_step(self, step: int) -> None: ...

    def after_step(self, result: StepResult, out: dict) -> None: ...

    def close(self, ok: bool) -> None: ...


class Base:
    """A hook that does nothing: subclasses define what they need."""

    def before_step(self, step: int) -> None:
        pass

    def after_step(self, result: StepResult, out: dict) -> None:
        pass

    def close(self, ok: bool) -> None:
        pass


class Evaluation(Base):
    """Held-out eval at eval.every, every checkpoint and the target; eval.tasks join it."""

    def __init__(self, session, layout):
        self.s = session
        self.downstream = Downstream.for_training(session.params, layout, session)  # checked before a step trains

    def after_step(self, result: StepResult, out: dict) -> None:
        s, step = self.s, result.step
        ev = compact(s.evaluate()) if s.held is not None and due(step, s.target, s.params) else None
        ev = self.downstream.at(step, s.target, ev)
        if ev:
            out["eval"] = ev


class Records(Base):
    """The step's record: train.jsonl (the monitor) and the trackers (log.backends)."""

    def __init__(self, session):
        self.s = session
        self.pending = session.pending  # rollbacks this timeline has not recorded yet: the first record holds them

    def after_step(self, r: StepResult, out: dict) -> None:
        extra = {"batches": r.batches, "grad_norm": r.grad_norm,
                 **({"guard": r.verdict} if r.verdict != "ok" else {}),
                 **({"skipped_batches": r.skipped} if r.skipped else {}),
                 **({"rollbacks": self.pending} if self.pending else {}), **out}
        if "eval" in out:
            extra["eval"] = as_row(out["eval"])
        self.pending = []
        self.s.trackers.step(self.s.monitor.step(r.step, loss=r.loss, lr=r.lr, data_wait_s=r.data_wait_s,
                                                 compute_s=r.step_s - r.data_wait_s, step_s=r.step_s, extra=extra))

    def close(self, ok: bool) -> None:
        self.s.monitor.close()
        self.s.trackers.close()  # after a rollback, what they hold past its step is dropped as they reopen


class Profiler(Base):
    """train.profile: a trace of the steps it names."""

    def __init__(self, session):
        self.s = session

    def before_step(self, step: int) -> None:
        self.s.profiler.before(step)

    def after_step(self, r: StepResult, out: dict) -> None:
        self.s.profiler.after(r.step)

    def close(self, ok: bool) -> None:
        self.s.profiler.after(self.s.state.step, end=True)


class Progress(Base):
    """Chaos points (tests kill here) and the orchestrator's progress callback."""

    def __init__(self, session):
        self.s = session

    def after_step(self, r: StepResult, out: dict) -> None:
        rank = self.s.dist.rank
        chaos.done("train", f"step {r.step} rank {rank}")
        chaos.point("train.step", f"{r.step}:rank{rank}")  # e.g. train.step@3:rank1 kills one rank
        if self.s.ctx.on_step:
            self.s.ctx.on_step(r.step, self.s.target)


class Checkpoints(Base):
    """Save at train.checkpoint_every and the target step; the lineage's parent follows each save."""

    def __init__(self, session):
        self.s = session
        self.saved: list[str] = []

    def after_step(self, r: StepResult, out: dict) -> None:
        s, step = self.s, r.step
        if step % s.params.train.checkpoint_every and step != s.target:
            return
        path = s.checkpointer.save(step, s.lin, out.get("eval"), then=functools.partial(
            s.after_save, before=s.guards.run[0]["step"] if s.guards.run else None))
        s.trackers.flush()
        if path is not None:
            self.saved.append(path.name)
            s.lin = s.lin.after(path.name)
        s.dist.barrier()

    def close(self, ok: bool) -> None:
        s = self.s
        s.checkpointer.wait()  # the last checkpoint (or one of the trouble, then removed) is on disk first
        if not ok:
            return
        if s.dist.rank == 0:  # a run killed inside its last retention, resumed with nothing to train, finishes it here
            s.retain(s.guards.run[0]["step"] if s.guards.run else None)
        if s.ctx.recorded and s.dist.rank == 0 and s.kept.exists():
            shutil.rmtree(s.kept)  # the orchestrator records data/checkpoints now: the links are not needed
        s.dist.barrier()


def hooks_for(session, layout, extra: tuple = ()) -> list:
    """The default hooks, in the order a step's work happens (module docstring), then `extra`."""
    return [Evaluation(session, layout), Records(session), Profiler(session), Progress(session), *extra,
            Checkpoints(session)]


def close(hooks: list, ok: bool) -> None:
    """The one way out of the loop: every hook's close, in reverse order."""
    for h in reversed(hooks):
        h.close(ok)
