"""Prefect tasks: thin adapters over the engine (retries, timeouts, no result caching).

Contract: a stage's per-part work becomes one Prefect task run per part (visible in the UI,
retried on its own). Only transient faults are retried (`shardline.core.errors.is_transient`:
network, 5xx, EIO, a busy lock), with exponential backoff and jitter; a deterministic error
(bad params, corrupt input) fails at once with the engine's message. Resume never comes from
Prefect state: the engine skips work already on disk.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.tasks import exponential_backoff

from shardline.core.config import Params
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


def part_mapper(params: Params, stage: str) -> Callable[[Callable, Sequence], list]:
    """A `shardline.core.parallel.Mapper` that runs each item as a Prefect task run named after it."""

    def mapper(fn: Callable, items: Sequence) -> list:
        items = list(items)
        t = task(fn, **options(params, f"{stage}-part"))
        futures = [t.with_options(task_run_name=f"{stage}:{_label(x)}").submit(x) for x in items]
        wait(futures)  # let running parts finish before a failure propagates
        return [f.result() for f in futures]

    return mapper


def _label(item: Any) -> str:
    return str(getattr(item, "name", None) or getattr(item, "out", None) or item)
