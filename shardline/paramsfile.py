"""params.yaml read into a complete, frozen `Params`: core's sections (shardline.core.config) with
the clean section its rules assemble (shardline.data.clean.stage.settings). It sits above both, so core
imports nothing above its floor (docs/architecture.md, Layers).

Contract: `load(path)` returns a `Params` or raises `ConfigError` listing *every* problem at once,
each as `<dotted.path>: <what is wrong>` (unknown keys get a did-you-mean); `parse(raw, origin)`
does the same for a mapping already read; `schema()` is `Params`, complete. The rules are imported
when a Params is first completed, not at import: a command that reads no params.yaml
(`shardline --help`) never loads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardline.core import config
from shardline.core.config import Params
from shardline.core.filenames import PARAMS


def schema() -> type[Params]:
    """`Params`, complete: with the clean section its rule registry assembles."""
    from shardline.data.clean.stage.settings import Clean

    return config.complete(Clean)


def parse(raw: Any, origin: str = PARAMS) -> Params:
    return config.parse(schema(), raw, origin)


def load(path: str | Path = PARAMS) -> Params:
    raw = config.read(path)  # a missing or broken file is told before the rules are imported
    return parse(raw, str(Path(path)))
