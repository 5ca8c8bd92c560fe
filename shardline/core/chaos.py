"""Named kill points for crash tests: `point(name)` SIGKILLs this process when the
comma-separated env var SHARDLINE_CHAOS names it. An entry is `name` (first hit), `name#k`
(the k-th hit in this process; in a stage's worker process, in that worker) or a full name with a qualifier such as `checkpoint.files@20`.
SHARDLINE_CHAOS_LOG names a file that gets the point that fired. SHARDLINE_CHAOS_SIGNAL=STOP freezes the
process there (SIGSTOP) instead, for a test that then kills what the failure takes with it (a whole
node's process groups). A real SIGKILL at an exact moment (mid-part, mid-checkpoint-write, mid-retention) that a test
or the chaos suite could not hit by timing alone, and that a seed can replay; a no-op costing
one env lookup otherwise.

Faults (`fault`): SHARDLINE_FAULTS lists real numerical faults for the training guards to meet,
each `train.<kind>@<batches>[:rank<r>]`, batches a number or a range `a-b` of global batches (1
is the first the loader hands out): train.nan_loss (the loss becomes NaN), train.inf_grad (one
gradient element becomes inf, after backward), train.spike (the loss, and so the gradient, x10).
Keyed by batch, not step, as bad data is: a rollback that skips the batches cures it.

Points after a piece of work: download.file, clean.part, minhash.part (a part's near-dedup
signatures written, their marker not yet), clean.cluster (after each LSH band is clustered),
clean.dedup, tokenize.part (token ids
written, their .json not yet), shard.file, train.step (+ @<step>:rank<r>, one rank of a torchrun
job), train.eval (after each held-out batch of an evaluation), train.rollback (the rollback ledger
written, nothing else done yet), checkpoint.files (+ @step), checkpoint.shard (+ @<step>:rank<r>: a
rank's shards of a sharded checkpoint written, not yet gathered), retention (+ @step). Two points
raise instead (`disk_full`: ENOSPC, as a disk full on one node), each + @<step>:rank<r>:
checkpoint.dcp (a rank's write phase inside DCP's save) and checkpoint.hash (DCP has written a
rank's shards; hashing them fails). Points inside a
write (`partway`: the k-th write call is cut in half, the first half flushed, then SIGKILL):
download.body (an HTTP body into its .part), clean.write (a clean part's parquet),
minhash.write (a part's signatures),
tokenize.write (a token part's ids), shard.write (a shard's bytes). The orchestrator adapters
(shardline.orchestration.flows) place and document three more, with `group=True` where the
process holding the work is the orchestrator itself: that kills the whole process group, so run the command in a session of
its own (`setsid`, as the suite does) or the kill reaches the shell that started it.

`done(stage, unit)` appends `done <stage> <unit>` for a finished unit of work (a file, a part, a
step) to the file SHARDLINE_CHAOS_DONE_LOG names, so the suite can show a resume redid nothing
already finished (the suite points both variables at one file: one log, in time order).
"""

from __future__ import annotations

import errno
import os
import signal
from collections import Counter
from typing import BinaryIO

from shardline.core.errors import BadInput

_hits: Counter[str] = Counter()
_worker = False


def in_worker() -> None:
    """Mark this process as a stage's pool worker: a kill here takes the stage process with it (as
    a crash of the machine would), and the other workers die with the stage (PR_SET_PDEATHSIG)."""
    global _worker
    _worker = True


def _named(name: str, qualifier: str | None) -> bool:
    """Count a hit of `name`; whether SHARDLINE_CHAOS names this one (and record that it fired)."""
    spec = os.environ.get("SHARDLINE_CHAOS")
    if not spec:
        return False
    _hits[name] += 1
    wanted = spec.split(",")
    if name in wanted or f"{name}#{_hits[name]}" in wanted or (qualifier and f"{name}@{qualifier}" in wanted):
        _record(f"{name}#{_hits[name]}")  # which point fired, for the suite's table
        return True
    return False


def point(name: str, qualifier: str | None = None, group: bool = False) -> None:
    """SIGKILL this process (`group`: its whole process group) if SHARDLINE_CHAOS names this hit."""
    if _named(name, qualifier):
        if os.environ.get("SHARDLINE_CHAOS_SIGNAL") == "STOP":  # frozen here, until killed from outside
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        if group:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        if _worker:
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def disk_full(name: str, qualifier: str | None = None) -> None:
    """Raise ENOSPC here if SHARDLINE_CHAOS names this hit: a disk that fills on one rank only."""
    if _named(name, qualifier):
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (planted: SHARDLINE_CHAOS={name})")


def done(stage: str, unit: str) -> None:
    """Record that `unit` of `stage` is finished and durable (no-op without SHARDLINE_CHAOS_DONE_LOG)."""
    _record(f"done {stage} {unit}", "SHARDLINE_CHAOS_DONE_LOG")


def _record(line: str, var: str = "SHARDLINE_CHAOS_LOG") -> None:
    path = os.environ.get(var)
    if path:
        with open(path, "a") as f:  # one short O_APPEND write: lines of parallel workers do not mix
            f.write(line + "\n")


class _Partway:
    """A binary file whose every write is kill point `name`, checked halfway through the write."""

    def __init__(self, f: BinaryIO, name: str):
        self._f, self._name = f, name

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        half = len(view) // 2
        self._f.write(view[:half])
        self._f.flush()  # the first half reaches the file: the kill leaves it partway written
        point(self._name)
        return half + self._f.write(view[half:])

    def __getattr__(self, attr):
        return getattr(self._f, attr)


def partway(f: BinaryIO, name: str) -> BinaryIO:
    """`f` itself, or, while SHARDLINE_CHAOS is set, `f` with every write a kill point `name`."""
    return _Partway(f, name) if os.environ.get("SHARDLINE_CHAOS") else f


FAULTS = ("train.nan_loss", "train.inf_grad", "train.spike")


def fault(name: str, batch: int, rank: int) -> bool:
    """Whether SHARDLINE_FAULTS plants fault `name` in global batch `batch` on this rank."""
    spec = os.environ.get("SHARDLINE_FAULTS")
    if not spec:
        return False
    hit = False
    for item in spec.split(","):  # every item checked, so a typo fails loudly instead of planting nothing
        what, _, where = item.partition("@")
        span, _, on = where.partition(":rank")
        lo, _, hi = span.partition("-")
        try:
            if what not in FAULTS:
                raise ValueError(what)
            hit |= what == name and int(lo) <= batch <= int(hi or lo) and (not on or int(on) == rank)
        except ValueError:
            raise BadInput(f"SHARDLINE_FAULTS: {item!r} is not <fault>@<batch>[-<batch>][:rank<r>] with a fault "
                           f"of {', '.join(FAULTS)}, e.g. train.spike@30-32:rank1") from None
    return hit


def planted(loss, batch: int, rank: int):
    """The loss with the faults SHARDLINE_FAULTS plants in this batch (a torch tensor in and out)."""
    if fault("train.nan_loss", batch, rank):
        loss = loss * float("nan")
    if fault("train.spike", batch, rank):
        loss = loss * 10.0
    return loss
