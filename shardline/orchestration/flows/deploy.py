"""The line's two deployments, served by one process or deployed to a work pool.

  shardline-pipeline/line       the whole line (dvc.yaml stages, skipping what is up to date)
  shardline-retrain/retrain     re-check sources; retrain only on a new data version (cron)

Both ways give the same names, parameters (root, params_file), concurrency limit 1 each, and
params.yaml's `retrain.cron` as the only schedule. They upsert the same deployments: use one.

- `shardline serve` (serve_line), the one-machine path: `prefect.serve` in this process, no
  pool; the runner takes one run at a time (limit=1) and reads the cron when it starts.
  Stopping it does not pause the schedule (pause_on_shutdown=False).
- `shardline deploy` (deploy_to_pool) + `shardline worker` (start_worker), Prefect's production
  setup: deploy creates the pools prefect.yaml names if missing (process type, concurrency
  limit 1: one run at a time however many workers poll), runs `prefect deploy --all` on the
  checkout's prefect.yaml with params.yaml's cron and params file in the environment, and
  refuses a retrain deployment whose cron is then not params.yaml's. `shardline worker` sweeps
  orphans, then execs `prefect worker start --pool` (same pid, so signals reach the worker).

Orphans: a flow-run process dying with its runner or worker (machine crash, OOM kill of the
group) leaves its run Running; that holds the concurrency slots, so the next run would wait.
When `shardline serve` starts, every Running/Pending run of its own deployments (served: no
work pool) is marked Crashed: one runner serves a project, so they are a dead runner's. When
`shardline worker` starts on a process pool, each Running run in that pool whose flow-run
process (the pid its worker recorded, infrastructure_pid) is gone from this machine is marked
Crashed; Pending runs are left alone (another worker may be about to start one). So a process
pool's workers must all run on one machine: a pid is only meaningful there. Docker and
Kubernetes pools get no sweep. The next run then resumes (finished stages skipped, training
from its last checkpoint). (A worker SIGKILLed alone needs none of this: with Prefect 3.9 the
flow-run process, in its own session, reports Crashed and exits within about a second.)

Errors a user can fix (no server answering, no prefect.yaml, `prefect deploy` refusing) are
ShardlineError: one line, exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName, FlowRunFilter,
                                            FlowRunFilterState, FlowRunFilterStateType, WorkPoolFilter,
                                            WorkPoolFilterName)
from prefect.client.schemas.objects import StateType
from prefect.states import Crashed

from shardline.orchestration.flows.server import OFFLINE
from shardline import paramsfile
from shardline.core.errors import ShardlineError

DEPLOYMENTS = ("line", "retrain")
POOL = "shardline"
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _say(msg: str) -> None:
    print(msg, flush=True)


def _alive(pid: str | None) -> bool:
    if not (pid or "").isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:  # a killed run whose parent (the worker) died too stays a zombie until init reaps it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # no /proc (macOS): the signal was delivered
        return True


def mark_orphans_crashed(log=_say, pool: str | None = None, who: str = "serve") -> int:
    """Mark Crashed the runs of our deployments left active by a runner or worker that died.
    serve (`pool` None): its own runs (no work pool), Running or Pending: one runner per
    project, so any of them is a dead runner's. A process pool: only Running runs whose
    flow-run process (the pid the worker recorded) is gone from this machine; a Pending run
    may be another worker's, about to start, and a pool's workers are on one machine."""
    states = [StateType.RUNNING] if pool else [StateType.RUNNING, StateType.PENDING]
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=states))),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=list(DEPLOYMENTS))),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])) if pool else None)
        if pool:
            runs = [r for r in runs if r.infrastructure_pid and not _alive(r.infrastructure_pid)]
        else:
            runs = [r for r in runs if r.work_pool_name is None]
        for run in runs:
            client.set_flow_run_state(run.id, Crashed(message="its runner or worker died while this run was "
                                                          "active; run the deployment again to resume"),
                                      force=True)
            log(f"{who}: marked orphaned flow run {run.name} ({run.id}) as Crashed")
    log(f"{who}: {len(runs)} orphaned run(s) marked Crashed")
    return len(runs)


def serve_line(root: str | Path = ".", params_file: str = "params.yaml") -> None:
    from prefect import serve

    from shardline.orchestration.flows.pipeline import pipeline, retrain  # here: deploy and worker do not import the flows

    root = str(Path(root).resolve())
    params = paramsfile.load(Path(root, params_file))
    mark_orphans_crashed()
    parameters = {"root": root, "params_file": params_file}
    serve(pipeline.to_deployment(name="line", parameters=parameters, concurrency_limit=1),
          retrain.to_deployment(name="retrain", parameters=parameters, cron=params.retrain.cron,
                                concurrency_limit=1),
          pause_on_shutdown=False, limit=1)


def require_server() -> str:
    """The API URL of the Prefect server this process would use, once it answers."""
    from prefect.settings import PREFECT_API_URL

    url = (PREFECT_API_URL.value() or "").rstrip("/")
    if not url:
        raise ShardlineError("PREFECT_API_URL is not set: start a server (prefect server start) and "
                             "export PREFECT_API_URL=http://127.0.0.1:4200/api")
    try:
        urllib.request.urlopen(f"{url}/health", timeout=5).close()
    except (OSError, ValueError) as e:
        raise ShardlineError(f"no Prefect server answers at PREFECT_API_URL={url} ({getattr(e, 'reason', e)}); "
                             "start one (prefect server start) or point PREFECT_API_URL at it") from None
    return url


def ensure_pool(name: str = POOL, log=_say, who: str = "deploy") -> str:
    """Create a process work pool `name` unless one exists (of any type: a Docker or Kubernetes
    pool made with `prefect work-pool create` is used as it is); return its type."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            pool = client.read_work_pool(name)
            log(f"{who}: work pool {name!r} ({pool.type}) exists")
            if pool.concurrency_limit is None:  # e.g. made by a `prefect worker start` that came first
                log(f"{who}: pool {name!r} has no concurrency limit, so line and retrain may run at once; "
                    f"prefect work-pool set-concurrency-limit {name} 1 makes it one run at a time")
            return pool.type
        except ObjectNotFound:
            pass
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process", concurrency_limit=1,
                                                   base_job_template=ProcessWorker.get_default_base_job_template()))
            log(f"{who}: created process work pool {name!r} (one run at a time)")
        except ObjectAlreadyExists:  # created meanwhile by another deploy or a worker
            pass
    return "process"


def deploy_to_pool(root: str | Path = ".", params_file: str = "params.yaml", log=_say) -> None:
    import yaml

    root = Path(root).resolve()
    params = paramsfile.load(root / params_file)  # validated before anything is deployed
    spec = root / "prefect.yaml"
    if not spec.is_file():
        raise ShardlineError(f"{spec} is missing; copy prefect.yaml from the Shardline repository next to dvc.yaml")
    url = require_server()
    # `prefect deploy --all` ignores --pool: the pools are the ones prefect.yaml names
    try:
        pools = sorted({d["work_pool"]["name"] for d in yaml.safe_load(spec.read_text())["deployments"]})
    except (yaml.YAMLError, KeyError, TypeError) as e:
        raise ShardlineError(f"{spec}: unreadable or a deployment without work_pool.name ({e}); compare it with "
                             "the repository's prefect.yaml") from None
    for pool in pools:
        ensure_pool(pool, log)
    env = {**os.environ, **OFFLINE, "SHARDLINE_RETRAIN_CRON": params.retrain.cron,
           "SHARDLINE_PARAMS_FILE": params_file}
    r = subprocess.run([PREFECT, "deploy", "--all", "--no-prompt", "--prefect-file", str(spec)],
                       cwd=root, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        tail = " | ".join(ln.strip() for ln in (r.stdout + r.stderr).strip().splitlines()[-6:] if ln.strip())
        raise ShardlineError(f"prefect deploy --prefect-file {spec} failed (exit {r.returncode}): {tail}")
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            d = client.read_deployment_by_name("shardline-retrain/retrain")
        except ObjectNotFound:
            raise ShardlineError(f"{spec} deployed no 'retrain' deployment of flow shardline-retrain; compare "
                                 "its deployments with the repository's prefect.yaml") from None
    crons = [getattr(s.schedule, "cron", None) for s in d.schedules]
    if crons != [params.retrain.cron]:  # prefect.yaml hard-coded a schedule of its own
        raise ShardlineError(f"shardline-retrain/retrain was deployed with cron {crons}, not params.yaml's "
                             f"retrain.cron {params.retrain.cron!r}; schedule it in prefect.yaml with "
                             "'{{ $SHARDLINE_RETRAIN_CRON }}'")
    log(f"deploy: shardline-pipeline/line and shardline-retrain/retrain (cron {params.retrain.cron!r}) on "
        f"work pool {', '.join(pools)} at {url}, running in {root}")
    log(f"deploy: next: shardline worker --pool {pools[0]}  (marks a dead worker's runs Crashed, then runs "
        f"prefect worker start --pool {pools[0]})")


def start_worker(pool: str = POOL, log=_say) -> None:
    """Sweep the pool's orphans, then become `prefect worker start --pool` (same pid, so what a
    supervisor sends this process reaches the worker itself)."""
    require_server()
    kind = ensure_pool(pool, log, who="worker")  # else `prefect worker start` makes one with no concurrency limit
    if kind == "process":
        mark_orphans_crashed(log, pool=pool, who="worker")
    else:  # a container's or a pod's id is no pid to check here: Prefect's own handling applies
        log(f"worker: a {kind} pool: no orphan sweep")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(PREFECT, [PREFECT, "worker", "start", "--pool", pool], {**os.environ, **OFFLINE})
    except OSError as e:
        raise ShardlineError(f"worker: cannot start {PREFECT} ({e}); is prefect installed in this environment "
                             "(pip install -e .)?") from None
