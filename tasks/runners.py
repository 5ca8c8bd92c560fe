"""The Prefect task runner that params.yaml's `parts` section names, and a worker check.

Contract:
- `task_runner(parts)` builds threads | processes | dask | ray; a stage flow uses it for its
  per-part task runs (clean, tokenize, shard). Outputs are byte-identical on every runner: the
  same engine functions write the same parts; only where they run differs.
- `check_workers(parts)`, called inside a flow running on that runner, fails fast with a
  message naming each worker that cannot import the project or runs other engine code. Without
  it, a Dask worker that cannot unpickle a task (project not installed there) logs the error
  in its own log only and the flow waits forever.
- Ray is kept quiet and local in tests: usage stats off, no dashboard.
"""

from __future__ import annotations

import concurrent.futures
import os

from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

import shardline
from shardline.core.config import Parts
from shardline.core.errors import ShardlineError

# Evaluated on each worker with the builtin eval (pickled by reference, so this check itself
# never needs the project on the worker): every module a task run unpickles, plus the engine's
# fingerprint.
_PROBE = "(__import__('prefect') and __import__('tasks') and __import__('flows') and __import__('shardline')).fingerprint()"


class WorkersUnfit(ShardlineError):
    """The cluster has no workers, or some cannot run this project's tasks."""


def _local_workers(parts: Parts) -> int:
    return parts.workers or os.cpu_count() or 1


def task_runner(parts: Parts) -> TaskRunner:
    if parts.runner == "threads":
        return ThreadPoolTaskRunner(max_workers=_local_workers(parts))
    if parts.runner == "processes":
        return ProcessPoolTaskRunner(max_workers=_local_workers(parts))
    if parts.runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            raise ShardlineError("parts.runner: dask needs prefect-dask; pip install 'shardline[dask]'") from None
        if parts.address:
            return DaskTaskRunner(address=parts.address, client_kwargs={"timeout": parts.connect_timeout_s})
        return DaskTaskRunner(cluster_kwargs={"n_workers": _local_workers(parts), "threads_per_worker": 1,
                                              "processes": True, "host": "127.0.0.1", "dashboard_address": None})
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # ray: never phone home
    try:
        from prefect_ray import RayTaskRunner
    except ImportError:
        raise ShardlineError("parts.runner: ray needs prefect-ray; pip install 'shardline[ray]'") from None
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
