"""A trained run as `shardline diff` and the evidence card compare it: its checkpoint, and its data when at hand.

Contract: `Run.open(label, layout, checkpoint)` reads a verified checkpoint's manifest and train
state; `layout` is where its data may lie (the work tree, or a revision's outputs linked from
DVC's cache: shardline.dvcrepo.revisions). `data` is True only when the shards there are the
ones it trained on (their content hash equals its lineage's data version): only then are that
layout's clean parts, drop logs, tokenizer and held-out shards taken as this run's. Without them
a comparison keeps to what the lineage records by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shardline.core import fsio
from shardline.core.errors import ShardlineError
from shardline.core.layout import Layout
from shardline.core.filenames import TRAIN_STATE
from shardline.stream.order import data_version, open_sources
from shardline.training import checkpoint
from shardline.training.records import Manifest


@dataclass(frozen=True)
class Run:
    label: str  # as the user named it (a checkpoint, `latest`, a revision, an experiment)
    layout: Layout
    checkpoint: Path
    manifest: Manifest
    state: dict
    data: bool

    @classmethod
    def open(cls, label: str, layout: Layout, path: Path) -> "Run":
        ok, why = checkpoint.verify(path)
        if not ok:
            raise ShardlineError(f"{label}: {path} is not a valid checkpoint ({why}); 'shardline checkpoints' lists them")
        manifest = checkpoint.read_manifest(path)
        return cls(label, layout, path, manifest, fsio.read_json(path / TRAIN_STATE), _trained_here(layout, manifest))

    @property
    def lineage(self):
        return self.manifest.lineage

    @property
    def name(self) -> str:
        return self.label

    def sources(self) -> list[str]:
        return [s.name for s in self.lineage.sources]


def _trained_here(layout: Layout, manifest: Manifest) -> bool:
    names = [s.name for s in manifest.lineage.sources]
    try:
        return data_version(open_sources(layout.shards, names)) == manifest.lineage.data_version.shards_sha256
    except (ShardlineError, OSError):
        return False


def latest(label: str, layout: Layout) -> Run:
    """The newest valid checkpoint under `layout` (a revision's view)."""
    path = checkpoint.latest_valid(layout.checkpoints, lambda _: None)
    if path is None:
        raise ShardlineError(f"{label}: no valid checkpoint recorded there (its data/checkpoints is empty or not in "
                             "DVC's cache: 'dvc pull' fetches it)")
    return Run.open(label, layout, path)
