"""How a stage spreads per-part work: a `Mapper` is `(fn, items) -> results in item order`.

The engine's default runs parts on a thread pool (encoders and parquet I/O release the GIL).
Orchestrators pass their own mapper (Prefect tasks, Dask, Ray) without the engine knowing.
The first failure is raised after the work already started has finished, so no part is left
half-written by an abandoned thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

from shardline.core import fsio

T = TypeVar("T")
R = TypeVar("R")
Mapper = Callable[[Callable[[T], R], Sequence[T]], list]


def thread_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    workers = workers or min(len(items), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, x) for x in items]
    return [f.result() for f in futures]


def per_source(root, sources: Sequence, fn: Callable, mapper: Mapper) -> dict:
    """Run `fn(source)` for every source into folder `root`, whose other sub-folders (sources
    no longer in params.yaml) are removed; results keyed by source name."""
    Path(root).mkdir(parents=True, exist_ok=True)
    fsio.prune_dirs(root, {s.name for s in sources})
    return {s.name: r for s, r in zip(sources, mapper(fn, sources))}
