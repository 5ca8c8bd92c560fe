"""How a stage spreads per-part work: a `Mapper` is `(fn, items, on_done=None) -> results in
item order`, calling `on_done(i, result)` in the caller's thread as each item finishes.

The engine has two: `thread_map` for work that releases the GIL (encoders, parquet and file
I/O) and `process_map` for work that holds it (the clean stage's per-document Python). Both
run a lone item in the caller, and `process_map` a batch too small to pay for spawning
workers (`worth_a_pool`) or a pool of one worker, so a small stage starts no pool. Orchestrators pass their own
mapper (Prefect tasks, Dask, Ray) without the engine knowing. The first failure is raised
after the work already started has finished, so no part is left half-written by an abandoned
worker.

A process pool's workers are spawned (never forked: the caller may hold threads) from the
thread that makes the pool, and die with their parent (Linux PR_SET_PDEATHSIG): a stage killed
leaves no worker writing behind it. A worker that dies (the OOM killer, a kill point) fails the
stage with a message naming the fix, not a pool traceback.

Design: docs/architecture.md (The stage frame: where the work runs).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from shardline.core import chaos, fsio
from shardline.core.errors import ShardlineError

T = TypeVar("T")
R = TypeVar("R")
Mapper = Callable[..., list]
OnDone = Callable[[int, object], None]


def workers_for(n: int, workers: int | None = None) -> int:
    return max(1, min(n, workers or os.cpu_count() or 1))


def _collect(futures: list[Future], on_done: OnDone | None) -> list:
    index = {f: i for i, f in enumerate(futures)}
    for f in as_completed(futures):  # every one finishes before a failure is raised
        if on_done is not None and f.exception() is None:
            on_done(index[f], f.result())
    return [f.result() for f in futures]


def _inline(fn: Callable, items: list, on_done: OnDone | None) -> list:
    out = []
    for i, x in enumerate(items):
        out.append(fn(x))
        if on_done is not None:
            on_done(i, out[-1])
    return out


def thread_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None,
               on_done: OnDone | None = None) -> list[R]:
    items = list(items)
    if len(items) <= 1:
        return _inline(fn, items, on_done)
    with ThreadPoolExecutor(max_workers=workers_for(len(items), workers)) as pool:
        return _collect([pool.submit(fn, x) for x in items], on_done)


def _worker_init() -> None:
    try:  # die with the stage: no orphan keeps writing parts after a kill
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown still reaps workers
        pass
    chaos.in_worker()


def _nothing() -> None:
    return None


class ProcessPool:
    """Spawned worker processes, all started now from this thread; `call(fn, x)` runs one item in
    one of them and waits (thread-safe, so a thread-per-part orchestrator can use it)."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_worker_init)
        for f in [self._pool.submit(_nothing) for _ in range(workers)]:  # spawn them all here
            f.result()

    def submit(self, fn: Callable, x) -> Future:
        return self._pool.submit(fn, x)

    def call(self, fn: Callable[[T], R], x: T) -> R:
        try:
            return self.submit(fn, x).result()
        except BrokenProcessPool:
            raise _died() from None

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "ProcessPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _died() -> ShardlineError:
    return ShardlineError("a worker process of this stage died (killed, or out of memory); finished parts are "
                          "kept: re-run the stage to resume (lower parts.workers if memory ran out)")


POOL_MIN_BYTES = 16 * 2**20  # spawning workers costs about a second of a core: not worth it below this


def worth_a_pool(items: Sequence) -> bool:
    """More than one item, and (for items that give their input `size`) enough bytes."""
    return len(items) > 1 and sum(getattr(x, "size", POOL_MIN_BYTES) for x in items) >= POOL_MIN_BYTES


def process_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None,
                on_done: OnDone | None = None) -> list[R]:
    items = list(items)
    if not worth_a_pool(items) or workers_for(len(items), workers) == 1:  # one worker: this process is it
        return _inline(fn, items, on_done)
    with ProcessPool(workers_for(len(items), workers)) as pool:
        try:
            return _collect([pool.submit(fn, x) for x in items], on_done)
        except BrokenProcessPool:
            raise _died() from None


def per_source(root, sources: Sequence, fn: Callable, mapper: Mapper) -> dict:
    """Run `fn(source)` for every source into folder `root`, whose other sub-folders (sources
    no longer in params.yaml) are removed; results keyed by source name."""
    Path(root).mkdir(parents=True, exist_ok=True)
    fsio.prune_dirs(root, {s.name for s in sources})
    return {s.name: r for s, r in zip(sources, mapper(fn, sources))}
