"""Prefect tasks: thin adapters over the engine (retries, timeouts, no result caching).

Contract: a stage's per-part work becomes one Prefect task run per part (visible in the UI,
retried on its own). Only transient faults are retried (`shardline.core.errors.is_transient`:
network, 5xx, EIO, a busy lock), with exponential backoff and jitter; a deterministic error
(bad params, corrupt input) fails at once with the engine's message. Resume never comes from
Prefect state: the engine skips work already on disk.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Callable, Sequence

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.tasks import exponential_backoff

from shardline import stages
from shardline.core.config import Params
from shardline.core.parallel import ProcessPool, workers_for, worth_a_pool
from shardline.core.progress import Sink
from shardline.core.errors import is_transient


def transient_only(task_: Any, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry only when the failure may be cured by trying again."""
    try:
        exc = state.result(raise_on_failure=False)
    except Exception:  # the result itself could not be read: do not guess
        return False
    return isinstance(exc, BaseException) and is_transient(exc)


def options(params: Params, name: str) -> dict:
    p = params.pipeline
    return dict(name=name, retries=p.retries, retry_delay_seconds=exponential_backoff(p.retry_delay_s),
                retry_jitter_factor=0.5, retry_condition_fn=transient_only,
                cache_policy=NO_CACHE, persist_result=False)


def part_mapper(params: Params, stage: str) -> Callable[..., list]:
    """A `shardline.core.parallel.Mapper` that runs each item as a Prefect task run named after it.
    Under the threads runner a stage whose parts hold the GIL (`stages.GIL_BOUND`) runs each task
    run's body in a process pool, so its parts use every core and stay one task run each."""

    def mapper(fn: Callable, items: Sequence, on_done: Callable | None = None) -> list:
        items = list(items)
        pooled = stage in stages.GIL_BOUND and params.engine.runner == "threads" and worth_a_pool(items)
        with ProcessPool(workers_for(len(items), params.engine.workers)) if pooled else contextlib.nullcontext() as pool:
            body = functools.partial(pool.call, fn) if pool else fn
            t = task(body, **options(params, f"{stage}-part"))
            futures = [t.with_options(task_run_name=f"{stage}:{_label(x)}").submit(x) for x in items]
            index = {id(f): i for i, f in enumerate(futures)}
            for f in as_completed(futures):  # let running parts finish before a failure propagates
                try:
                    result = f.result()
                except Exception:  # raised below, once every part has finished
                    continue
                if on_done is not None:
                    on_done(index[id(f)], result)
            return [f.result() for f in futures]

    return mapper


def progress_sink(stage: str) -> Sink:
    """A `shardline.core.progress.Sink` that keeps one Prefect progress artifact per stage run."""
    made: dict = {"at": 0.0}

    def sink(name: str, fraction: float, line: str) -> None:
        # every API call costs a round trip: a whole percent more, and at most one a second
        pct, now = float(int(100 * fraction)), time.monotonic()
        if made.get("pct") == pct or (pct < 100 and now - made["at"] < 1.0 and "id" in made):
            return
        made["pct"], made["at"] = pct, now
        if "id" not in made:
            made["id"] = create_progress_artifact(progress=pct, key=f"{stage}-progress", description=line)
        else:
            update_progress_artifact(artifact_id=made["id"], progress=pct, description=line)

    return sink


def _label(item: Any) -> str:
    return str(getattr(item, "name", None) or getattr(item, "out", None) or item)
