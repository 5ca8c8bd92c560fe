"""Where a stage runs: the one place that decides, for `shardline stage` and the pipeline flow alike.

Contract: `dispatch(name, layout, params_file, params, **known)` runs stage `name` either

- here, in this process, with the one `RunContext` shardline.orchestration.tasks.invoke.run_context builds from `known`
  (what the caller knows: its log, a progress sink, --run-id / --shards-md5, whether DVC records
  the outputs next), its parts on the engine's own pools (threads; clean's worker processes; the
  process pool `parts: processes` sizes) or on the Dask cluster `parts` names (shardline.orchestration.tasks.runners); or
- as its stage flow (shardline.orchestration.flows.stage_flows), its parts as task runs on Prefect's Ray task runner
  (`parts: ray`): the flow run builds its own context.

Before either, the optional libraries the stage needs for these params are checked
(shardline.core.extras.for_stage): a missing extra stops it with one line naming it, before any work.
Outputs are byte-identical either way. The engine is handed the outcome (a mapper) and never
calls back up. Prefect is imported only for the second way: `shardline stage` under `dvc repro`
does not pay for it.
"""

from __future__ import annotations

from shardline import registry
from shardline.core import extras
from shardline.core.config import Params
from shardline.core.layout import Layout
from shardline.orchestration.tasks import runners
from shardline.orchestration.tasks.invoke import invoke, run_context


def on_task_runner(params: Params, name: str) -> bool:
    """True when stage `name`'s parts go to the Prefect task runner `parts.runner` names (Ray)
    instead of the engine's own pools or a Dask cluster the engine is handed (shardline.orchestration.tasks.runners.mapper)."""
    return name in registry.PARTED and params.parts.runner == "ray"


def dispatch(name: str, layout: Layout, params_file: str, params: Params, **known):
    """Run stage `name` here, or as its stage flow on the task runner (see the module docstring)."""
    extras.check(extras.for_stage(name, params, parted=name in registry.PARTED))
    if on_task_runner(params, name):
        from shardline.orchestration.flows.stage_flows import run_flow

        return run_flow(name, str(layout.root), params_file, params)
    if name in registry.PARTED and "mapper" not in known and (mapper := runners.mapper(params)) is not None:
        known["mapper"] = mapper
    return invoke(name, params, layout, run_context(name, layout, **known))
