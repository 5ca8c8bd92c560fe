"""The stages by name: which stages exist and how each may be run; `shardline.stages` holds what
each one runs.

Every data stage's entry point is `run(params, layout, log, mapper, sink)`, report's `run(params,
layout, log, mapper)`, train's and a plug-in stage's `run(params, layout, ctx: RunContext)`.
Orchestrators (the `shardline` command that dvc.yaml calls, the Prefect flows) decide where a
stage runs and what it is told; this table only names the stages and groups them. It imports no
stage (it sits just above core, which it alone imports, and which never imports it: a core
module that needs a stage's group is told it, as core/extras.py's `parted`), and a plug-in
stage (the "shardline.stages" entry points, shardline.core.plugins) is looked up only when a name
is not built in. Plug-in stages are in no group: they run in-process, told what the RunContext holds, as does
`plugins` (BOOKKEEPING), the first stage of dvc.yaml, which records the plug-ins' releases.
"""

from __future__ import annotations

from shardline.core import plugins

NAMES = ("download", "clean", "tokenize", "shard", "train", "report")  # the built-in stages, in line order
PARTED = ("clean", "tokenize", "shard")  # per-part work that params.yaml's `parts` may spread over a task runner
DATA = ("download", *PARTED)  # the stages that take a progress `sink`
BOOKKEEPING = ("plugins",)  # not a step of the line: what DVC cannot see (the installed plug-ins' releases)
GIL_BOUND = ("clean",)  # parts that hold the GIL (per-document Python): processes, not threads, on one machine


def is_plugin(name: str) -> bool:
    return name not in NAMES and name in plugins.names("stages")


def check(name: str, where: str = "stage") -> None:
    """A PluginError (one line, every known stage) for a name no stage has."""
    if name not in NAMES and name not in BOOKKEEPING and not is_plugin(name):
        raise plugins.PluginError(f"{where}: {plugins.unknown(name, 'stages', NAMES)}")
