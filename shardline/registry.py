"""The data stages by name: one place that maps a dvc.yaml stage to its engine entry point.

Every entry point has the signature `run(params, layout, log, mapper)`, the data stages' also a
progress `sink`; orchestrators (the CLI that dvc.yaml calls, the Prefect flows) differ only in
the mapper, the log and the sink they pass, and hand the train stage what only they know.
Modules are imported on demand so a stage pays only for the libraries it uses.
"""

from __future__ import annotations

import importlib
from typing import Callable

_MODULES = {"download": "data.download", "clean": "data.clean", "tokenize": "data.tokenize", "shard": "data.shard",
            "train": "training.train", "report": "results.report"}
NAMES = tuple(_MODULES)
PARTED = ("clean", "tokenize", "shard")  # per-part work that params.yaml's `engine` may spread
DATA = ("download", *PARTED)  # the stages that take a progress `sink`
GIL_BOUND = ("clean",)  # parts that hold the GIL (per-document Python): processes, not threads, on one machine


def uses_engine(params, name: str) -> bool:
    """True when the stage's parts go to the Prefect task runner `engine.runner` names (Dask,
    Ray, processes) instead of the engine's own threads."""
    return name in PARTED and params.engine.runner != "threads"


def runner(name: str) -> Callable:
    return importlib.import_module(f"shardline.{_MODULES[name]}").run


def run(name: str, params, layout, elsewhere: Callable[[], object], **kw):
    """Run stage `name` here with the orchestrator's `kw` (log, sink, what train needs), or, when
    its parts go to the task runner params.yaml's `engine` names, through `elsewhere` (the
    orchestrator's stage flow on that runner): the one place that decides where a stage runs."""
    if uses_engine(params, name):
        return elsewhere()
    return call(name, params, layout, **kw)


def call(name: str, params, layout, **kw):
    if name == "train":
        from shardline.context import RunContext
        return runner(name)(params, layout, RunContext(**{k: v for k, v in kw.items() if k != "mapper"}))
    return runner(name)(params, layout, **kw)
