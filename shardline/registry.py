"""The stages by name: the one table from a dvc.yaml stage to its engine entry point.

Every data stage's entry point is `run(params, layout, log, mapper, sink)`, report's `run(params,
layout, log, mapper)`, train's `run(params, layout, ctx: RunContext)`. Orchestrators (the
`shardline` command that dvc.yaml calls, the Prefect flows) decide where a stage runs and what it
is told; this table only names the stages and groups them. Modules are imported on demand, so a
stage pays only for the libraries it uses.
"""

from __future__ import annotations

import importlib
from typing import Callable

_MODULES = {"download": "data.download", "clean": "data.clean.stage", "tokenize": "data.tokenize",
            "shard": "data.shard", "train": "training.train", "report": "results.report"}
NAMES = tuple(_MODULES)
PARTED = ("clean", "tokenize", "shard")  # per-part work that params.yaml's `parts` may spread over a task runner
DATA = ("download", *PARTED)  # the stages that take a progress `sink`
GIL_BOUND = ("clean",)  # parts that hold the GIL (per-document Python): processes, not threads, on one machine


def entry_point(name: str) -> Callable:
    """Stage `name`'s `run` function."""
    return importlib.import_module(f"shardline.{_MODULES[name]}").run
