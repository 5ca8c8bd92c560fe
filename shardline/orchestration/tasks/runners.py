"""Where a stage's parts run, as params.yaml's `parts` section names it, and a worker check.

Contract:
- `mapper(parts)` is the engine's Mapper for the runner, Prefect-free: processes (the engine's own
  pool of `parts.workers`), dask (`dask_mapper`: each part a task of the cluster at
  `parts.address`, or of a temporary local one), or None (threads, the engine's default; ray,
  which runs as a Prefect stage flow on `task_runner`). A part's transient fault (network, EIO,
  a busy lock: `is_transient`) is retried, `pipeline.retries` times with backoff; anything else
  fails the stage once every part in flight has finished; parts still running after
  `pipeline.stage_timeout_s` are cancelled and fail it, named.
- `task_runner(parts)` builds the Prefect task runner for a stage flow (ray; threads and
  processes for flows that ask; Dask's parts never run as Prefect task runs, so prefect-dask is
  not a dependency). Outputs are byte-identical on every runner: the same engine
  functions write the same parts; only where they run differs.
- Why Dask without Prefect task runs: a task run per part cost ~0.13 s of a worker and the
  server's CPU, and the stage's flow run ~2.5 s of the driver (Prefect's import, the flow run's
  creation and end), which on one machine took the cluster's cores from the parts: 2 workers ran
  the clean stage at 1.12x one. A stage still shows in Prefect when the pipeline flow runs it.
- `check_workers(parts)`, called inside a flow running on that runner, fails fast with a
  message naming each worker that cannot import the project or runs other engine code. Without
  it, a Dask worker that cannot unpickle a task (project not installed there) logs the error
  in its own log only and the flow waits forever.
- Ray is kept quiet and local in tests: usage stats off, no dashboard.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import random
import time
from typing import Callable, Sequence

import shardline
from shardline.core import extras
from shardline.core.config import Params, Parts
from shardline.core.errors import ShardlineError, is_transient
from shardline.core.parallel import process_map

# Evaluated on each worker with the builtin eval (pickled by reference, so this check itself
# never needs the project on the worker): every module a task run unpickles, plus the engine's
# fingerprint.
_PROBE = ("(__import__('prefect') and __import__('shardline.orchestration.tasks.runners') and "
          "__import__('shardline.orchestration.flows.stage_flows')).fingerprint()")


class WorkersUnfit(ShardlineError):
    """The cluster has no workers, or some cannot run this project's tasks."""


def _local_workers(parts: Parts) -> int:
    return parts.workers or os.cpu_count() or 1


def mapper(params: Params) -> Callable | None:
    """The engine's Mapper for `parts.runner`, or None where the engine's default (threads) or a
    Prefect stage flow (ray) runs the parts."""
    parts = params.parts
    if parts.runner == "processes":
        return functools.partial(process_map, workers=_local_workers(parts))
    if parts.runner == "dask":
        return functools.partial(dask_map, params=params)
    return None


def dask_map(fn: Callable, items: Sequence, on_done: Callable | None = None, *, params: Params) -> list:
    """Each item a task of the Dask cluster `parts.address` names (a temporary local one when
    unset), results in item order; `on_done(i, result)` as each finishes, in this thread."""
    items = list(items)
    if not items:
        return []
    extras.need("distributed", "parts.runner dask")
    from distributed import Client, LocalCluster, as_completed

    parts = params.parts
    check_workers(parts)
    cluster = None if parts.address else LocalCluster(n_workers=_local_workers(parts), threads_per_worker=1,
                                                      processes=True, host="127.0.0.1", dashboard_address=None)
    try:
        with Client(parts.address or cluster, timeout=parts.connect_timeout_s, set_as_default=False) as client:
            run = functools.partial(_retried, fn, retries=params.pipeline.retries, delay=params.pipeline.retry_delay_s)
            futures = [client.submit(run, x, key=f"{_label(x)}-{i}-{time.time_ns()}", pure=False)
                       for i, x in enumerate(items)]
            index = {f.key: i for i, f in enumerate(futures)}
            timeout = params.pipeline.stage_timeout_s
            try:  # every part finishes before a failure is raised
                for f in as_completed(futures, loop=client.loop, timeout=timeout):
                    if f.status == "finished" and on_done is not None:
                        on_done(index[f.key], f.result())
            except TimeoutError:
                late = [_label(items[i]) for i, f in enumerate(futures) if not f.done()]
                client.cancel(futures)
                raise ShardlineError(f"{len(late)} part(s) still running after pipeline.stage_timeout_s={timeout:g}s "
                                     f"on the Dask cluster: {', '.join(late[:5])}{' ...' if len(late) > 5 else ''}; "
                                     "check the workers (a hung or lost worker), or raise the timeout") from None
            return [f.result() for f in futures]
    finally:
        if cluster is not None:
            cluster.close()


def _retried(fn: Callable, x, retries: int, delay: float):
    """fn(x), a transient fault retried with exponential backoff and +/-50% jitter."""
    for attempt in range(retries + 1):
        try:
            return fn(x)
        except Exception as e:
            if attempt == retries or not is_transient(e):
                raise
            time.sleep(delay * 2**attempt * random.uniform(0.5, 1.5))


def _label(item) -> str:
    return str(getattr(item, "name", None) or getattr(item, "out", None) or item).replace("/", ":")


def task_runner(parts: Parts):
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

    if parts.runner == "threads":
        return ThreadPoolTaskRunner(max_workers=_local_workers(parts))
    if parts.runner == "processes":
        return ProcessPoolTaskRunner(max_workers=_local_workers(parts))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # ray: never phone home
    extras.need("prefect_ray", "parts.runner ray")
    from prefect_ray import RayTaskRunner

    init = {"include_dashboard": False}
    if not parts.address:
        init.update(num_cpus=_local_workers(parts), _node_ip_address="127.0.0.1")
    return RayTaskRunner(address=parts.address, init_kwargs=init)


def check_workers(parts: Parts) -> list[str]:
    """The workers' addresses, once each one has shown it runs this engine. Only an existing
    Dask cluster (parts.address) is checked: local pools and clusters are started from the
    driver's own interpreter, and a Ray worker's import error is raised by Ray in the flow."""
    if parts.runner != "dask" or not parts.address:
        return []
    extras.need("distributed", "parts.runner dask")
    from distributed import Client

    t = parts.connect_timeout_s
    try:
        client = Client(parts.address, timeout=t, set_as_default=False)
    except OSError as e:
        raise WorkersUnfit(f"parts.address: cannot reach the Dask scheduler at {parts.address} within {t:.0f}s "
                           f"(parts.connect_timeout_s): {e}") from None
    with client, concurrent.futures.ThreadPoolExecutor(1) as pool:
        def ask(fn, *args, **kw):
            try:
                return pool.submit(fn, *args, **kw).result(timeout=t)
            except concurrent.futures.TimeoutError:
                raise WorkersUnfit(f"parts: the Dask cluster at {client.scheduler.address} did not answer within "
                                   f"{t:.0f}s (parts.connect_timeout_s); are its workers alive?") from None

        try:
            ask(client.wait_for_workers, 1, timeout=t)
        except (TimeoutError, WorkersUnfit):
            raise WorkersUnfit(f"parts: the Dask cluster at {client.scheduler.address} has no workers after "
                               f"{t:.0f}s (parts.connect_timeout_s); start some with 'dask worker "
                               f"{client.scheduler.address}'") from None
        answers = ask(client.run, eval, _PROBE, on_error="return")
    mine = shardline.fingerprint()
    bad = [f"  {w}: {type(a).__name__}: {a}" if isinstance(a, BaseException) else
           f"  {w}: runs other engine code (fingerprint {a}, the driver's is {mine})"
           for w, a in sorted(answers.items()) if isinstance(a, BaseException) or a != mine]
    if bad:
        raise WorkersUnfit(f"parts: {len(bad)} of {len(answers)} Dask worker(s) cannot run this project's tasks:\n"
                           + "\n".join(bad) + "\nInstall the same checkout on every worker (pip install -e . in the "
                           "environment 'dask worker' runs in), with data/ on a filesystem shared at the same path, "
                           "then restart the workers.")
    return sorted(answers)
