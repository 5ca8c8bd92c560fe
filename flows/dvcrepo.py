"""DVC as the one declaration of the DAG: stage order, up-to-date checks, and lock records.

The pipeline never keeps its own list of stages: `stage_order` reads dvc.yaml through DVC's
Python API (the same graph `dvc repro` walks). After the pipeline runs a stage in-process it
records it with `commit`, which writes the same dvc.lock entry `dvc repro` would (deps,
params and outs hashed by DVC itself) and saves the outputs to the DVC cache.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def open_repo(root: str | Path) -> Iterator["object"]:
    from dvc.repo import Repo

    repo = Repo(str(root))
    try:
        yield repo
    finally:
        repo.close()


def stage_order(repo) -> list[str]:
    """Stage names with every stage after the stages it depends on (ties: dvc.yaml order)."""
    import networkx as nx

    graph = repo.index.graph  # edges point from a stage to the stages producing its deps
    position = {s.addressing: i for i, s in enumerate(repo.index.stages)}
    order = nx.lexicographical_topological_sort(graph.reverse(copy=True), key=lambda s: f"{position[s.addressing]:06d}")
    return [s.addressing for s in order]


def locked(repo):
    """DVC's re-entrant repo lock (the one `dvc repro` takes), held across a whole stage."""
    from dvc.repo import lock_repo

    return lock_repo(repo)


def out_hash(root: str | Path, out: str) -> str | None:
    """The hash dvc.lock records for output `out` (None if never recorded)."""
    from shardline.lineage import dvc_md5

    return dvc_md5(Path(root), out)


def is_up_to_date(repo, name: str) -> bool:
    return not repo.status(targets=[name])


def commit(repo, name: str) -> None:
    repo.commit(name, force=True)
