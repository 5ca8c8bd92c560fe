"""One Prefect flow per stage: the engine stage with each part as a retried task run.

Contract: a stage flow's outputs are byte-identical to `shardline stage <name>` (what
dvc.yaml runs): both call `shardline.stages.runner(name)`; only the mapper differs. The
stage timeout (`pipeline.stage_timeout_s`) is enforced on the flow, which runs in the main
thread where Prefect can interrupt it. The parted stages (clean, tokenize, shard) run their
parts on the task runner params.yaml's `engine` names, after checking its workers; with
`engine.runner` other than threads, `shardline stage` and the pipeline flow come through here.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from shardline import stages
from shardline.core import config
from shardline.core.layout import Layout
from flows import dvcrepo
from tasks import part_mapper, progress_sink
from tasks.runners import check_workers, task_runner


def run_stage(name: str, root: str = ".", params_file: str = "params.yaml", params=None) -> dict:
    """The stage's flow, on the task runner `engine` names; `params`: the caller's, already loaded
    from `params_file` (the flow loads the file itself: a flow run is defined by its parameters)."""
    layout = Layout.at(root)
    params = params or config.load(Path(layout.root, params_file))
    opts: dict = {"timeout_seconds": params.pipeline.stage_timeout_s}
    if name in stages.PARTED:
        opts["task_runner"] = task_runner(params.engine)
    return FLOWS[name].with_options(**opts)(root=str(layout.root), params_file=params_file)


def _stage_flow(name: str):
    @flow(name=f"shardline-{name}", log_prints=True)
    def stage_flow(root: str = ".", params_file: str = "params.yaml") -> dict:
        layout = Layout.at(root)
        params = config.load(Path(layout.root, params_file))
        log = get_run_logger().info
        if stages.uses_engine(params, name):
            workers = check_workers(params.engine)
            log(f"{name}: parts on the {params.engine.runner} runner" + (f", {len(workers)} worker(s): "
                                                                         f"{', '.join(workers)}" if workers else ""))
        extra = {"run_id": str(flow_run.id), "shards_md5": dvcrepo.shards_md5(layout)} if name == "train" else {}
        if name in stages.DATA:
            extra["sink"] = progress_sink(name)
        return stages.call(name, params, layout, log=log, mapper=part_mapper(params, name), **extra)

    stage_flow.__name__ = f"{name}_flow"
    return stage_flow


FLOWS = {name: _stage_flow(name) for name in stages.NAMES}
