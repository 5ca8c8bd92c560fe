"""What each stage runs: a built-in stage's `run`, its module imported by name in code here and
only when the stage runs (a stage pays only for its own libraries), or a plug-in stage's, loaded
through its "shardline.stages" entry point.

Contract: `run_of(name)` is stage `name`'s entry point, with the signature `shardline.registry`
states; an unknown name is the registry's one line listing every stage. This module stands above
every stage module (docs/architecture.md, Layers): the registry below it names the stages and
imports none.
"""

from __future__ import annotations

from typing import Callable

from shardline import registry
from shardline.core import plugins


def _download() -> Callable:
    from shardline.data import download
    return download.run


def _clean() -> Callable:
    from shardline.data.clean.stage import run as stage
    return stage.run


def _tokenize() -> Callable:
    from shardline.data import tokenize
    return tokenize.run


def _shard() -> Callable:
    from shardline.data import shard
    return shard.run


def _train() -> Callable:
    from shardline.training import train
    return train.run


def _report() -> Callable:
    from shardline.results import report
    return report.run


def _plugins() -> Callable:
    def run(params, layout, ctx) -> None:  # dvc.yaml runs it as `python -m shardline.core.plugins` (cheaper)
        plugins.record(layout, params.model.arch, ctx.log)
    return run


BUILTIN: dict[str, Callable[[], Callable]] = {"plugins": _plugins, "download": _download, "clean": _clean, "tokenize": _tokenize,
                                              "shard": _shard, "train": _train, "report": _report}


def run_of(name: str) -> Callable:
    """Stage `name`'s `run` function."""
    if name in BUILTIN:
        return BUILTIN[name]()
    registry.check(name)
    return plugins.load("stages", name)
