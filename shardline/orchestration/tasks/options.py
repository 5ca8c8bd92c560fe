"""The options of every Prefect task run of the line: retries, timeouts, no result caching.

Contract: only transient faults are retried (`shardline.core.errors.is_transient`: network, 5xx,
EIO, a busy lock), with exponential backoff and jitter (params.yaml's `pipeline`); a
deterministic error (bad params, corrupt input) fails at once with the engine's message.
Resume never comes from Prefect state: the engine skips work already on disk.
"""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NO_CACHE
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
