"""Where a run's checkpoints live: one interface for the checkpointer, resume, the guards'
rollbacks and retention, over a folder or an object store.

Contract:
- `Local(root)`: data/checkpoints on a filesystem (shardline.training.checkpoint: temp dirs
  renamed; kept hard links under .shardline/kept/; an old run's checkpoints archived for a fresh
  one). `Bucket(uri)`: train.checkpoint_uri (shardline.training.bucket: the objects first, the
  manifest last; nothing kept or archived beside it: no checkout replaces a store, and a fresh
  run is given a prefix of its own).
- A checkpoint's handle is a Path (Local) or a bucket.URL (Bucket); both have `.name` (step-N)
  and are picklable, so rank 0 can share one.
- `for_run(params, layout)` is the run's store, a bucket's requests under params.store's retry
  policy (shardline.training.bucketio); `of(x)` takes a store, a folder (what tools and tests
  pass) or a URL.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

from shardline.core import fsio, retry, stores
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import MANIFEST, Layout, step_dir, step_dirs
from shardline.training import bucket, checkpoint, identity
from shardline.training.records import Lineage, Manifest

Log = Callable[[str], None]


class Local:
    """data/checkpoints (or any folder): the filesystem's checkpoints, as checkpoint.py writes them."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def __str__(self) -> str:
        return str(self.root)

    def step_path(self, step: int) -> Path:
        return step_dir(self.root, step)

    def staging(self, step: int) -> Path:
        """Where a sharded save's ranks write (renamed to step_path once its manifest is written)."""
        return checkpoint.temp_dir(self.root, step)

    def clear(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def save(self, step: int, tensors: dict, state: dict, lineage: Lineage, eval: dict | None = None,
             shards: list | None = None) -> Path:
        return checkpoint.save(self.root, step, tensors, state, lineage, eval, shards)

    def load(self, path: Path, skip: tuple[str, ...] = ()):
        return checkpoint.load(path, skip)

    def verify(self, path: Path, cached: bool = False) -> tuple[bool, str]:
        return checkpoint.verify(path, cached)

    def latest_valid(self, log: Log) -> Path | None:
        return checkpoint.latest_valid(self.root, log)

    def step_dirs(self) -> list[Path]:
        return step_dirs(self.root)

    def read_json(self, path: Path, name: str) -> Any:
        return fsio.read_json(Path(path) / name)

    def manifest(self, path: Path) -> Manifest:
        return checkpoint.read_manifest(path)

    def write_json(self, name: str, obj: Any) -> None:
        fsio.write_json(self.root / name, obj)

    def remove(self, path: Path) -> None:
        checkpoint.remove(path)

    def retain(self, keep_last: int, keep_every: int, log: Log, before: int | None = None) -> list[int]:
        return checkpoint.retain(self.root, keep_last, keep_every, log, before=before)

    def sweep(self, log: Log) -> None:
        """What a killed save left: its temp dirs."""
        if self.root.exists():
            fsio.remove_temps(self.root)

    def check(self) -> None:
        """Nothing to prove: a folder that cannot be written fails the first save with the OSError's line."""

    def keep(self, path: Path, kept: Path) -> None:
        checkpoint.keep(path, kept)

    def tidy_kept(self, kept: Path, recoverable, log: Log) -> None:
        checkpoint.tidy_kept(kept, self.root, recoverable, log)

    def set_aside(self, old: dict, recoverable, log: Log) -> None:
        identity.set_aside(self.root, old, recoverable, log)


class Bucket:
    """train.checkpoint_uri: checkpoints on an object store, as bucket.py writes them; every request
    under `policy` (params.store's; else what `uri` carries, else the store section's defaults)."""

    def __init__(self, uri: str, policy: retry.Policy | None = None):
        self.root = bucket.URL(uri.rstrip("/"), policy or getattr(uri, "policy", None))

    def __str__(self) -> str:
        return str(self.root)

    def step_path(self, step: int) -> bucket.URL:
        return bucket.step_url(self.root, step)

    def staging(self, step: int) -> bucket.URL:
        """No rename on a store: the ranks write where the checkpoint will be, cleared first."""
        return self.step_path(step)

    def clear(self, staging: str) -> None:
        bucket.remove(staging)

    def save(self, step: int, tensors: dict, state: dict, lineage: Lineage, eval: dict | None = None,
             shards: list | None = None) -> bucket.URL:
        return bucket.save(self.root, step, tensors, state, lineage, eval, shards)

    def load(self, path: str, skip: tuple[str, ...] = ()):
        return bucket.load(path, skip)

    def verify(self, path: str, cached: bool = False) -> tuple[bool, str]:
        return bucket.verify(path, cached)

    def latest_valid(self, log: Log) -> bucket.URL | None:
        return bucket.latest_valid(self.root, log)

    def step_dirs(self) -> list[bucket.URL]:
        return bucket.step_dirs(self.root)

    def read_json(self, path: str, name: str) -> Any:
        return bucket.read_json(path, name)

    def manifest(self, path: str) -> Manifest:
        return bucket.read_manifest(path)

    def write_json(self, name: str, obj: Any) -> None:
        bucket.write_json(self.root, name, obj)

    def remove(self, path: str) -> None:
        bucket.remove(path)

    def retain(self, keep_last: int, keep_every: int, log: Log, before: int | None = None) -> list[int]:
        return bucket.retain(self.root, keep_last, keep_every, log, before=before)

    def sweep(self, log: Log) -> None:
        bucket.sweep(self.root, log)

    def check(self) -> None:
        """The store takes a write (its bucket exists, the credentials may write): at the start, not
        at the first save, steps later."""
        stores.check_bucket(self.root, "train.checkpoint_uri", self.root.policy)
        bucket.check(self.root)

    def keep(self, path: str, kept: Path) -> None:
        """Nothing: no checkout can replace what a store holds."""

    def tidy_kept(self, kept: Path, recoverable, log: Log) -> None:
        """Nothing kept beside a store."""

    def no_archive(self, what: str) -> BadInput:
        """A fresh run cannot set the old one's checkpoints aside here (Local.set_aside archives them)."""
        return BadInput(f"train: {what}; but train.checkpoint_uri {self.root} holds the old run's checkpoints, and "
                        "a store has no archive to move them to: point train.checkpoint_uri at a new prefix for "
                        "the new run (the old run's stay where they are)")


Store = Local | Bucket


def of(where: Store | Path | str) -> Store:
    if isinstance(where, (Local, Bucket)):
        return where
    return Bucket(where) if isinstance(where, str) and "://" in where else Local(Path(where))


def for_run(params: Params, layout: Layout) -> Store:
    uri = params.train.checkpoint_uri
    return Bucket(uri, retry.of(params.store, "store")) if uri else Local(layout.checkpoints)


def fetch(url: str, dest: Path) -> Path:
    """A verified local copy of checkpoint `url`: dest/<step-N>, written as a temp dir, manifest
    last, then renamed (a copy there before is replaced, manifest first). Each object arrives whole
    under the retry policy `url` carries (bucketio: a fault mid-object is continued by Range)."""
    url = bucket.URL(url)
    final = Path(dest) / url.name
    names = sorted(bucket.listing(url))
    if MANIFEST not in names:
        raise BadInput(f"{url}: not a checkpoint (no manifest.json: a save that did not finish); "
                       "'shardline checkpoints' lists the valid ones")
    if (final / MANIFEST).is_file() and (final / MANIFEST).read_bytes() == bucket.cat(url, MANIFEST) \
            and checkpoint.verify(final)[0]:
        return final  # fetched before, and whole: the same manifest vouches for the same bytes
    tmp = fsio.temp_name(final)
    shutil.rmtree(tmp, ignore_errors=True)
    for name in [n for n in names if n != MANIFEST] + [MANIFEST]:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        bucket.get(url / name, tmp / name)  # verified below; a kill leaves only a temp dir, never a checkpoint
    ok, why = checkpoint.verify(tmp)
    if not ok:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BadInput(f"{url}: not a valid checkpoint ({why}); 'shardline checkpoints' lists the valid ones")
    if (final / MANIFEST).is_file() and (final / MANIFEST).read_bytes() == (tmp / MANIFEST).read_bytes():
        shutil.rmtree(tmp)  # another command fetched it meanwhile, and may be reading it
        return final
    if final.exists():  # an older copy of this step
        checkpoint.remove(final)
    os.rename(tmp, final)
    fsio.fsync_dir(final.parent)
    return final
