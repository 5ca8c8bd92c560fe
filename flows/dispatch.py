"""Where a stage runs: the one place that decides, for `shardline stage` and the pipeline flow alike.

Contract: `dispatch(name, layout, params_file, params, **known)` runs stage `name` either

- here, in this process, with the engine's own pools (threads; clean's worker processes), and the
  one `RunContext` tasks.invoke.run_context builds from `known` (what the caller knows: its log,
  a progress sink, --run-id / --shards-md5, whether DVC records the outputs next); or
- as its stage flow (flows.stage_flows), its parts as task runs on the task runner params.yaml's
  `parts` names, when that is not threads: the flow run builds its own context.

Outputs are byte-identical either way. The engine is handed the outcome (a mapper) and never
calls back up. Prefect is imported only for the second way: `shardline stage` under `dvc repro`
does not pay for it.
"""

from __future__ import annotations

from shardline import registry
from shardline.core.config import Params
from shardline.core.layout import Layout
from tasks.invoke import invoke, run_context


def on_task_runner(params: Params, name: str) -> bool:
    """True when stage `name`'s parts go to the Prefect task runner `parts.runner` names (processes,
    Dask, Ray) instead of the engine's own threads and processes."""
    return name in registry.PARTED and params.parts.runner != "threads"


def dispatch(name: str, layout: Layout, params_file: str, params: Params, **known):
    """Run stage `name` here, or as its stage flow on the task runner (see the module docstring)."""
    if on_task_runner(params, name):
        from flows.stage_flows import run_flow

        return run_flow(name, str(layout.root), params_file, params)
    return invoke(name, params, layout, run_context(name, layout, **known))
