"""One Prefect flow per stage: the engine stage with each part as a retried task run.

Contract: a stage flow's outputs are byte-identical to the stage run in-process (`shardline stage
<name>`, what dvc.yaml runs): both call the stage's entry point through shardline.orchestration.tasks.invoke; only the
mapper differs. The stage timeout (`pipeline.stage_timeout_s`) is enforced on the flow, which runs
in the main thread where Prefect can interrupt it. The parted stages (clean, tokenize, shard) run
their parts on the task runner params.yaml's `parts` names, after checking its workers;
shardline.orchestration.flows.dispatch sends a stage here when its parts go to Ray (`parts: ray`); Dask and the process
pool are handed to the engine in-process (shardline.orchestration.tasks.runners.mapper).
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from shardline import registry
from shardline import paramsfile
from shardline.core.layout import Layout
from shardline.orchestration.tasks.invoke import invoke, run_context, run_log
from shardline.orchestration.tasks.mappers import part_mapper
from shardline.orchestration.tasks.progress import progress_sink
from shardline.orchestration.tasks.runners import check_workers, task_runner


def run_flow(name: str, root: str = ".", params_file: str = "params.yaml", params=None) -> dict:
    """Stage `name` as its flow, a parted stage's on the task runner `parts` names; `params`: the
    caller's, already loaded from `params_file` (the flow loads the file itself: a flow run is
    defined by its parameters)."""
    layout = Layout.at(root)
    params = params or paramsfile.load(Path(layout.root, params_file))
    opts: dict = {"timeout_seconds": params.pipeline.stage_timeout_s}
    if name in registry.PARTED:
        opts["task_runner"] = task_runner(params.parts)
    return FLOWS[name].with_options(**opts)(root=str(layout.root), params_file=params_file)


def _stage_flow(name: str):
    @flow(name=f"shardline-{name}", log_prints=True)
    def stage_flow(root: str = ".", params_file: str = "params.yaml") -> dict:
        layout = Layout.at(root)
        params = paramsfile.load(Path(layout.root, params_file))
        log = run_log(get_run_logger())
        if name in registry.PARTED:
            workers = check_workers(params.parts)
            log(f"{name}: parts on the {params.parts.runner} runner" + (f", {len(workers)} worker(s): "
                                                                        f"{', '.join(workers)}" if workers else ""))
        ctx = run_context(name, layout, log=log, progress=progress_sink(name), mapper=part_mapper(params, name),
                          run_id=str(flow_run.id))
        return invoke(name, params, layout, ctx)

    stage_flow.__name__ = f"{name}_flow"
    return stage_flow


FLOWS = {name: _stage_flow(name) for name in registry.NAMES}
