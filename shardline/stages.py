"""The data stages by name: one place that maps a dvc.yaml stage to its engine entry point.

Every entry point has the signature `run(params, layout, log, mapper)`; orchestrators (the
CLI that dvc.yaml calls, the Prefect flows) differ only in the mapper and the log they pass.
Modules are imported on demand so a stage pays only for the libraries it uses.
"""

from __future__ import annotations

import importlib
from typing import Callable

_MODULES = {"download": "download", "clean": "clean", "tokenize": "encode", "shard": "shard", "train": "train",
            "report": "report"}
NAMES = tuple(_MODULES)


def runner(name: str) -> Callable:
    return importlib.import_module(f"shardline.{_MODULES[name]}").run
