"""Deployments served by one long-running process: the line, and scheduled retraining.

Choice: `prefect.serve` (a runner in this process) rather than prefect.yaml + a work pool and
worker: one command, no pool to create, the flows are imported from this checkout, and the
cron schedule comes from params.yaml every time the runner starts. Served deployments:

  shardline-pipeline/line       the whole line (dvc.yaml stages, skipping what is up to date)
  shardline-retrain/retrain     re-check sources; retrain only on a new data version (cron)

One run at a time: the runner takes one run at a time (limit=1) and each deployment has a
concurrency limit of 1. Stopping the runner does not pause the schedule
(pause_on_shutdown=False). At start, runs of these deployments still marked Running or
Pending belong to a runner that died: they are marked Crashed, so nothing waits on them.
"""

from __future__ import annotations

from pathlib import Path

from prefect import serve
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName, FlowRunFilter,
                                            FlowRunFilterState, FlowRunFilterStateType)
from prefect.client.schemas.objects import StateType
from prefect.states import Crashed

from flows.pipeline import pipeline, retrain
from shardline.core import config

DEPLOYMENTS = ("line", "retrain")


def mark_orphans_crashed(log=print) -> int:
    """Runs of our deployments still Running/Pending when a runner starts belong to a dead one."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING]))),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=list(DEPLOYMENTS))))
        for run in runs:
            client.set_flow_run_state(run.id, Crashed(message="the runner died while this run was active; "
                                                              "run the deployment again to resume"), force=True)
            log(f"serve: marked orphaned flow run {run.name} ({run.id}) as Crashed")
    log(f"serve: {len(runs)} orphaned run(s) marked Crashed", flush=True)
    return len(runs)


def serve_line(root: str | Path = ".", params_file: str = "params.yaml") -> None:
    root = str(Path(root).resolve())
    params = config.load(Path(root, params_file))
    mark_orphans_crashed()
    parameters = {"root": root, "params_file": params_file}
    serve(pipeline.to_deployment(name="line", parameters=parameters, concurrency_limit=1),
          retrain.to_deployment(name="retrain", parameters=parameters, cron=params.retrain.cron,
                                concurrency_limit=1),
          pause_on_shutdown=False, limit=1)
