"""A stage's parts as Prefect task runs: one task run per part, visible in the UI, retried alone.

Contract: `part_mapper(params, stage)` is a `shardline.core.parallel.Mapper` (`(fn, items,
on_done) -> results in order`) that a flow hands the engine; the engine does not know Prefect
runs its parts. Parts run on the flow's task runner (params.yaml's `parts`, shardline.orchestration.tasks.runners); every
part finishes before the first failure is raised, so none is left half-done behind it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Sequence

from prefect import task
from prefect.futures import as_completed

from shardline import registry
from shardline.core.config import Params
from shardline.core.parallel import ProcessPool, workers_for, worth_a_pool
from shardline.orchestration.tasks.options import options


def part_mapper(params: Params, stage: str) -> Callable[..., list]:
    """A `shardline.core.parallel.Mapper` that runs each item as a Prefect task run named after it.
    Under the threads runner a stage whose parts hold the GIL (`registry.GIL_BOUND`) runs each task
    run's body in a process pool, so its parts use every core and stay one task run each."""

    def mapper(fn: Callable, items: Sequence, on_done: Callable | None = None) -> list:
        items = list(items)
        pooled = stage in registry.GIL_BOUND and params.parts.runner == "threads" and worth_a_pool(items)
        with ProcessPool(workers_for(len(items), params.parts.workers)) if pooled else contextlib.nullcontext() as pool:
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


def _label(item: Any) -> str:
    return str(getattr(item, "name", None) or getattr(item, "out", None) or item)
