"""Checkpoints: data/checkpoints/step-<N:09d>/, valid iff its manifest verifies.

Contract:
- `save` writes every file into a temp dir `.step-N.tmp-<pid>` (each fsynced), then
  manifest.json LAST (each file's bytes + sha256, plus lineage, the held-out eval at this step
  and library versions), fsyncs
  the dir, renames it to `step-N` and fsyncs the parent. A killed save leaves only a temp dir,
  which the next run sweeps.
- `verify` is the only judge of validity: manifest present and parseable, every file present
  with its size and sha256. `latest_valid` returns the newest valid checkpoint and says, for
  every newer one it skips, why.
- The manifest is a `records.Manifest` (typed, with its `format_version`), built by `manifest_of`
  and read only through `read_manifest` (or `load`). One of another version, or with a field this
  release does not read, is neither valid nor invalid here: `verify` (so every reader: resume,
  retention, load, export) raises BadInput naming it, the release that wrote it and what to do,
  so a newer release's checkpoint is never skipped, misread or removed. No field (written before
  it existed): 1.
- `retain` keeps the newest `keep_last` valid checkpoints plus every step divisible by
  `keep_every` (and, when asked, the newest one before a given step); it removes a checkpoint's manifest first (fsynced), so one half-deleted is
  already invalid, and never removes the newest valid one.
- `load` uses `torch.load(weights_only=True)`: a checkpoint is data, never code.
- `keep` hard-links a saved checkpoint outside data/ (the trainer keeps those nothing records
  yet under .shardline/kept/), so no checkout that replaces data/checkpoints loses one.
- Two formats, told apart by the manifest's "format": "full" (model.pt and optimizer.pt as one
  process saves them) and "sharded" (shardline.training.sharded: every rank's shards under dcp/,
  written by the ranks into the temp dir rank 0 names; `save` then adds rank 0's files and the
  manifest, listing the gathered ranks' files too). Both verify, retain, keep and remove alike.
- On an object store (train.checkpoint_uri), where nothing can be renamed,
  shardline.training.bucket keeps this contract (objects first, the manifest last), sharing
  `manifest_of` and retention's choice (`prune`) with this module.

Design: docs/architecture.md (Data contracts: Checkpoints).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from shardline.core import chaos, fsio
from shardline import __version__
from shardline.core.errors import ShardlineError
from shardline.core.layout import ARCHIVE, DCP, MANIFEST, STEP_DIRS, TENSORS, TRAIN_STATE, step_dir, step_dirs, step_of
from shardline.training import sharded
from shardline.training.records import Lineage, Manifest

Log = Callable[[str], None]


@dataclass(frozen=True)
class Entry:
    step: int
    path: Path  # or a store's URL (shardline.training.bucket)
    valid: bool
    why: str  # "ok" or the reason it is not valid


def versions() -> dict:
    import numpy
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "shardline": __version__}


def _write(path: Path, fill: Callable[[Any], None]) -> dict:
    with open(path, "wb") as f:
        out = fsio.Hashing(f)
        fill(out)
        f.flush()
        os.fsync(f.fileno())
    return out.meta()


def manifest_of(step: int, files: dict, lineage: Lineage, eval: dict | None, shards: list | None) -> Manifest:
    """A checkpoint's manifest (what `save` writes last, here or on a store: shardline.training.bucket)."""
    return Manifest.new(step, files, lineage, eval, shards, versions(), time.time())


def temp_dir(root: Path, step: int) -> Path:
    """Where checkpoint `step` is written before its rename (this process's name for it)."""
    return fsio.temp_name(step_dir(root, step))


def save(root: Path, step: int, tensors: dict[str, Any], state: dict, lineage: Lineage, eval: dict | None = None,
         shards: list[dict[str, dict]] | None = None) -> Path:
    """Write checkpoint `step`: `tensors` (name -> torch-saveable) and `state` (JSON); the manifest
    also holds the lineage and `eval`, the held-out evaluation at this step (None: eval off).
    `shards`: a sharded checkpoint, whose ranks have written their files into `temp_dir`, each
    rank's {file: {bytes, sha256}} in rank order."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, step)
    tmp = temp_dir(root, step)
    if shards is None:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        files = {name: meta for mine in shards or [] for name, meta in mine.items()}
        if shards is not None:
            for name, meta in files.items():  # what another rank wrote must be here too, whole
                p = tmp / name
                if not p.is_file() or p.stat().st_size != meta["bytes"]:
                    raise ShardlineError(
                        f"checkpoint: {p} (a rank's shard, {meta['bytes']} bytes) is not in rank 0's temp dir whole; "
                        f"{root} must be on a filesystem every rank shares (at the same path)")
            fsio.fsync_dir(tmp / DCP)
        if tensors:
            import torch  # here, not at import: listing, verifying and reading lineage need no torch (~3 s)
        for name, obj in tensors.items():
            files[name] = _write(tmp / name, lambda out, obj=obj: torch.save(obj, out))
        files[TRAIN_STATE] = _write(tmp / TRAIN_STATE,
                                    lambda out: out.write(json.dumps(state, indent=2, sort_keys=True).encode()))
        chaos.point("checkpoint.files", str(step))
        manifest = manifest_of(step, files, lineage, eval, shards)
        # compact: the C encoder (indent= forces the pure-Python one, ~5x slower on a big lineage)
        _write(tmp / MANIFEST, lambda out: out.write(json.dumps(manifest.to_json(), sort_keys=True).encode()))
        fsio.fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # e.g. ENOSPC: the previous checkpoint stays the newest valid
        raise
    if final.exists():  # the same step again after a resume: retire the old copy, manifest first
        remove(final)
    os.rename(tmp, final)
    fsio.fsync_dir(root)
    chaos.done("checkpoint", final.name)
    _verified[(str(final), (final / MANIFEST).stat().st_mtime_ns)] = (True, "ok")  # just hashed while writing
    return final


_verified: dict[tuple[str, int], tuple[bool, str]] = {}


def verify(path: Path, cached: bool = False) -> tuple[bool, str]:
    """Full check (sha256 of every file). `cached`: trust a result this process already got for
    the same manifest (retention runs after every save; re-hashing every kept checkpoint each
    time would cost more than the save)."""
    path = Path(path)
    try:
        key = (str(path), (path / MANIFEST).stat().st_mtime_ns)
    except OSError:
        key = None
    if cached and key in _verified:
        return _verified[key]
    result = _verify(path)
    if key is not None and result[0]:
        _verified[key] = result
    return result


def _verify(path: Path) -> tuple[bool, str]:
    try:  # unreadable JSON is a torn write (invalid); a record this release cannot read raises BadInput
        manifest = Manifest.from_json(json.loads((path / MANIFEST).read_text()), path)
    except FileNotFoundError:
        return False, "no manifest.json (torn or interrupted write)"
    except (OSError, ValueError) as e:
        return False, f"manifest.json unreadable ({e})"
    for name, meta in manifest.files.items():
        p = path / name
        if not p.exists():
            return False, f"{name} missing"
        if p.stat().st_size != meta.bytes:
            return False, f"{name} is {p.stat().st_size} bytes, manifest says {meta.bytes} (truncated)"
        if fsio.sha256_file(p) != meta.sha256:
            return False, f"{name} sha256 differs from the manifest (corrupt)"
    if manifest.format == "sharded":
        why = sharded.files_check(path, manifest)
        if why:
            return False, why
    return True, "ok"


def read_manifest(path: Path) -> Manifest:
    """The manifest of checkpoint folder `path` (BadInput for one this release does not read)."""
    return Manifest.from_json(fsio.read_json(Path(path) / MANIFEST), path)


def entries(root: Path, cached: bool = False) -> list[Entry]:
    """Every checkpoint directory, oldest first, with its validity."""
    out = []
    for p in step_dirs(root):
        if p.is_dir():
            ok, why = verify(p, cached)
            out.append(Entry(step_of(p), p, ok, why))
    return out


def latest_valid(root: Path, log: Log = print) -> Path | None:
    """The newest checkpoint that verifies; older ones are not hashed (resume reads only it)."""
    dirs = [p for p in step_dirs(root) if p.is_dir()]
    for p in sorted(dirs, reverse=True):
        ok, why = verify(p)
        if ok:
            return p
        log(f"checkpoint: skipping {p.name}: {why}")
    return None


def load(path: Path, skip: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict, Manifest]:
    """(tensors by file name, train state, manifest) of a verified checkpoint; `skip`: tensor
    files not to read (e.g. what another rank will broadcast)."""
    path = Path(path)
    import torch

    m = read_manifest(path)
    tensors = {name: torch.load(path / name, map_location="cpu", weights_only=True)
               for name in m.files if name.endswith(TENSORS) and name not in skip}  # not dcp/
    return tensors, json.loads((path / TRAIN_STATE).read_text()), m


def remove(path: Path) -> None:
    manifest = path / MANIFEST
    if manifest.exists():
        manifest.unlink()
        fsio.fsync_dir(path)  # invalid from here on, whatever happens next
    shutil.rmtree(path)


def retain(root: Path, keep_last: int, keep_every: int, log: Log = print, before: int | None = None) -> list[int]:
    """Apply retention; returns the steps removed. `before`: also keep the newest valid checkpoint
    older than this step (the one a rollback of trouble starting there returns to)."""
    return prune(entries(root, cached=True), remove, keep_last, keep_every, log, before)


def prune(all_: list[Entry], remove: Callable[[Any], None], keep_last: int, keep_every: int, log: Log,
          before: int | None) -> list[int]:
    """Retention over `all_` (a folder's or a store's entries), `remove` taking each one that goes."""
    valid = [e for e in all_ if e.valid]
    keep = {e.step for e in valid[-max(keep_last, 1):]}
    keep |= {e.step for e in valid if keep_every and e.step % keep_every == 0}
    keep |= {max((e.step for e in valid if before is not None and e.step < before), default=-1)}
    removed = []
    for e in all_:
        if e.step not in keep:
            chaos.point("retention", str(e.step))
            remove(e.path)
            removed.append(e.step)
    if removed:
        log(f"checkpoint: retention removed step(s) {removed}")
    return removed


def keep(path: Path, kept: Path) -> Path:
    """Hard-link a saved checkpoint to `kept`/<its name> (manifest last, so the copy is valid iff
    complete, like the original): a tool that later replaces data/checkpoints (a checkout of
    another version) then cannot take the only copy. Costs no space while the original lives."""
    dest = Path(kept) / path.name
    tmp = fsio.temp_name(dest)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    for name in [n for n in names if n != MANIFEST] + [MANIFEST]:
        (tmp / name).parent.mkdir(exist_ok=True)
        try:
            os.link(path / name, tmp / name)
        except OSError:  # another filesystem, or no hard links: a copy (fsynced)
            fsio.copy_file(path / name, tmp / name)
    for d in sorted({(tmp / n).parent for n in names}, reverse=True):
        fsio.fsync_dir(d)
    if dest.exists():
        remove(dest)
    os.rename(tmp, dest)
    fsio.fsync_dir(dest.parent)
    return dest


def tidy_kept(kept: Path, root: Path, recoverable: Callable[[Path], bool] | None, log: Log = print) -> list[Path]:
    """Drop kept copies that something now records (`recoverable`); name the ones that are the
    only copy left (their data/checkpoints twin is gone: a checkout replaced it). Returns those."""
    alone = []
    for path in sorted(p for p in Path(kept).glob(f"*/{STEP_DIRS}") if step_of(p) is not None):  # not a temp's
        if recoverable is not None and recoverable(path):
            remove(path)
            continue
        mine = (path / MANIFEST).read_bytes() if (path / MANIFEST).exists() else None
        twins = [step_dir(root, step_of(path))] + sorted(Path(root).glob(f"{ARCHIVE}/*/{path.name}*"))
        if not any((t / MANIFEST).exists() and (t / MANIFEST).read_bytes() == mine for t in twins):
            alone.append(path)
            log(f"checkpoint: {path} is the only copy (data/checkpoints lost it, a checkout?, and nothing records "
                f"it); 'cp -al {path} {root}/' restores it")
    for d in Path(kept).glob("*"):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return alone
