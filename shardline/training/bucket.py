"""Checkpoints on an object store (train.checkpoint_uri): shardline.training.checkpoint's contract
where nothing can be renamed.

Contract:
- A checkpoint is the prefix `<uri>/step-<N:09d>/`, holding what a checkpoint folder holds (dcp/:
  each rank's objects, put by DCP's fsspec writer, shardline.training.sharded) and manifest.json,
  put LAST, once every other object is stored: with no rename, the manifest is the commit. Valid
  iff it verifies, for `checkpoint.verify`'s reasons; a prefix without one is never read.
- A save first clears its prefix (what a killed save of the step left, or the copy a resume
  retires). `remove`, retention (`retain`: checkpoint.prune's choice) and `sweep` (rank 0 at every
  start: the prefixes without a manifest) delete a manifest before the rest, so a half-deleted
  checkpoint is already invalid.
- Objects are written whole through fsspec, hashed as they are sent (no second read); a PUT is
  atomic on an object store, which `write_json` (the rollback ledger) relies on. Listings bypass
  fsspec's cache: other nodes write the same prefix.
- A handle is a `URL` (a str with a Path's `.name` and `/`): picklable, so ranks share it.
- `listing`, `cat` and `get` are the reads shardline.training.storage.fetch copies a checkpoint
  into a folder with.
- Credentials and endpoint come from the environment (shardline.core.stores); `check` proves the
  store writable at a run's start; a store's failure is StoreError, one line naming the URL.

Design: docs/architecture.md (Data contracts: Checkpoints); docs/scaling.md (Nodes that share
only a bucket).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any, Callable

from shardline.core import chaos, fsio
from shardline.core.errors import ShardlineError, is_transient
from shardline.core.layout import DCP, MANIFEST, TENSORS, TRAIN_STATE, step_dir, step_of
from shardline.core.stores import filesystem
from shardline.training import checkpoint, sharded
from shardline.training.records import Lineage, Manifest

Log = Callable[[str], None]
_CHUNK = 1 << 22


class URL(str):
    """A place in the store: the URL itself, with a Path's `.name` and `/`."""

    @property
    def name(self) -> str:
        return self.rstrip("/").rpartition("/")[2]

    def __truediv__(self, other: str) -> "URL":
        return URL(f"{self.rstrip('/')}/{other}")


class StoreError(ShardlineError):
    """The checkpoint store failed (a missing bucket, the network, credentials); names the URL."""


def _store_op(writes: bool):
    """A decorator: the function's store failures as StoreError (transient ones stay so). A read's
    FileNotFoundError stays one (no such object: its callers' answer); a write's is the bucket's."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapped(url, *args, **kwargs):
            try:
                return fn(url, *args, **kwargs)
            except ShardlineError:
                raise
            except Exception as e:
                if isinstance(e, FileNotFoundError) and not writes:
                    raise
                err = StoreError(f"train.checkpoint_uri {url}: {type(e).__name__}: {e}; check that the bucket "
                                 "exists, the network, and the AWS_* credentials and endpoint in the environment")
                err.transient = is_transient(e)
                raise err from e
        return wrapped
    return decorate


_read, _write = _store_op(writes=False), _store_op(writes=True)


def step_url(root: str, step: int) -> URL:
    return URL(root) / step_dir("", step).name


@_read
def listing(url: str) -> dict[str, int]:
    """Every object under `url`, by its name below it, with its size: fresh from the store."""
    fs, p = filesystem(url)
    fs.invalidate_cache(p)
    try:
        found = fs.find(p, detail=True)
    except FileNotFoundError:
        return {}
    return {k[len(p) + 1:]: info["size"] for k, info in found.items() if k.startswith(p + "/")}


@_read
def step_dirs(root: str) -> list[URL]:
    """The step-N prefixes under `root`, oldest first (their names sort by step)."""
    fs, p = filesystem(root)
    fs.invalidate_cache(p)
    try:
        names = [n.rstrip("/").rpartition("/")[2] for n in fs.ls(p, detail=False)]
    except FileNotFoundError:
        return []
    return [URL(root) / n for n in sorted(set(names)) if step_of(n) is not None]


def _folder(fs, p: str) -> None:
    """A local file:// store needs the folder an object goes in; a store has none to make."""
    if getattr(fs, "local_file", False):
        fs.makedirs(p.rpartition("/")[0], exist_ok=True)


@_write
def _put(url: str, fill: Callable[[Any], None]) -> dict:
    fs, p = filesystem(url)
    _folder(fs, p)
    with fs.open(p, "wb") as f:
        out = fsio.Hashing(f)
        fill(out)
    return out.meta()  # closed: the object is stored


def save(root: str, step: int, tensors: dict[str, Any], state: dict, lineage: Lineage, eval: dict | None = None,
         shards: list[dict[str, dict]] | None = None) -> URL:
    """checkpoint.save on a store: `shards`, a sharded checkpoint whose ranks have put their files
    under step_url(root, step) (cleared before they did); full, the prefix is cleared here."""
    url = step_url(root, step)
    if shards is None:
        remove(url)
    try:
        files = {name: meta for mine in shards or [] for name, meta in mine.items()}
        stored = listing(url) if shards is not None else {}
        for name, meta in files.items():  # what another rank put must be there too, whole
            if stored.get(name) != meta["bytes"]:
                raise ShardlineError(f"checkpoint: {url}/{name} (a rank's shard, {meta['bytes']} bytes) is not in "
                                     f"the store whole ({stored.get(name)} bytes there)")
        if tensors:
            import torch  # here, not at import: listing and verifying need no torch
        for name, obj in tensors.items():
            files[name] = _put(url / name, lambda out, obj=obj: torch.save(obj, out))
        files[TRAIN_STATE] = _put(url / TRAIN_STATE,
                                  lambda out: out.write(json.dumps(state, indent=2, sort_keys=True).encode()))
        chaos.point("checkpoint.files", str(step))
        manifest = checkpoint.manifest_of(step, files, lineage, eval, shards).to_json()
        body = json.dumps(manifest, sort_keys=True).encode()
        _put(url / MANIFEST, lambda out: out.write(body))  # last: from here on the checkpoint is valid
    except BaseException:
        with suppress(Exception):  # no manifest vouches for what is there; the previous checkpoint stays the newest
            remove(url)
        raise
    chaos.done("checkpoint", url.name)
    _verified[(url, fsio.sha256_bytes(body))] = (True, "ok")  # just hashed while sending
    return url


_verified: dict[tuple[str, str], tuple[bool, str]] = {}


def verify(url: str, cached: bool = False) -> tuple[bool, str]:
    """checkpoint.verify on a store. `cached`: trust a result this process already got for the same
    manifest bytes (retention after every save)."""
    try:
        body = cat(url, MANIFEST)
    except FileNotFoundError:
        return False, "no manifest.json (torn or interrupted write)"
    key = (str(url), fsio.sha256_bytes(body))
    if cached and key in _verified:
        return _verified[key]
    result = _verify(url, body)
    if result[0]:
        _verified[key] = result
    return result


def _verify(url: str, body: bytes) -> tuple[bool, str]:
    try:
        obj = json.loads(body)
    except ValueError as e:
        return False, f"manifest.json unreadable ({e})"
    manifest = Manifest.from_json(obj, url)
    stored = listing(url)
    for name, meta in manifest.files.items():
        if name not in stored:
            return False, f"{name} missing"
        if stored[name] != meta.bytes:
            return False, f"{name} is {stored[name]} bytes, manifest says {meta.bytes} (truncated)"
        if _sha256(URL(url) / name) != meta.sha256:
            return False, f"{name} sha256 differs from the manifest (corrupt)"
    if manifest.format == "sharded":
        why = sharded.files_check(url, manifest, {n for n in stored if n.startswith(f"{DCP}/")})
        if why:
            return False, why
    return True, "ok"


@_read
def _sha256(url: str) -> str:
    fs, p = filesystem(url)
    h = hashlib.sha256()
    with fs.open(p, "rb", block_size=_CHUNK) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def entries(root: str, cached: bool = False) -> list[checkpoint.Entry]:
    """Every step prefix, oldest first, with its validity."""
    return [checkpoint.Entry(step_of(u), u, *verify(u, cached)) for u in step_dirs(root)]


def latest_valid(root: str, log: Log = print) -> URL | None:
    """The newest checkpoint that verifies; older ones are not read."""
    for url in reversed(step_dirs(root)):
        ok, why = verify(url)
        if ok:
            return url
        log(f"checkpoint: skipping {url.name}: {why}")
    return None


def load(url: str, skip: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict, Manifest]:
    """checkpoint.load on a store: (tensors by file name, train state, manifest) of a verified
    checkpoint, each tensor file by torch.load(weights_only=True)."""
    import torch

    manifest = read_manifest(url)
    tensors = {name: torch.load(io.BytesIO(cat(url, name)), map_location="cpu", weights_only=True)
               for name in manifest.files if name.endswith(TENSORS) and name not in skip}  # not dcp/
    return tensors, read_json(url, TRAIN_STATE), manifest


def read_manifest(url: str) -> Manifest:
    """The manifest of checkpoint `url` (BadInput for one this release does not read)."""
    return Manifest.from_json(read_json(url, MANIFEST), url)


@_read
def cat(url: str, name: str) -> bytes:
    """The bytes of object `name` under `url`."""
    fs, p = filesystem(url)
    return fs.cat_file(f"{p}/{name}")


@_read
def get(url: str, local: Path) -> None:
    """Object `url` into local file `local`."""
    fs, p = filesystem(url)
    fs.get_file(p, str(local))


def read_json(url: str, name: str) -> Any:
    return json.loads(cat(url, name))


@_write
def write_json(root: str, name: str, obj: Any) -> None:
    """One object, put whole (atomic on an object store)."""
    fs, p = filesystem(root)
    _folder(fs, f"{p}/{name}")
    fs.pipe_file(f"{p}/{name}", (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


@_write
def remove(url: str) -> None:
    """The manifest first (invalid from here on, whatever happens next), then every object."""
    fs, p = filesystem(url)
    with suppress(FileNotFoundError):
        fs.rm_file(f"{p}/{MANIFEST}")
    fs.invalidate_cache(p)
    with suppress(FileNotFoundError):
        fs.rm(p, recursive=True)


@_write
def check(root: str) -> None:
    """Fail at the start, not at the first save: put and delete one object under `root`."""
    fs, p = filesystem(root)
    probe = f"{p}/.probe-{os.getpid()}"
    _folder(fs, probe)
    fs.pipe_file(probe, b"")
    fs.rm_file(probe)


def retain(root: str, keep_last: int, keep_every: int, log: Log = print, before: int | None = None) -> list[int]:
    """checkpoint.retain on a store; returns the steps removed."""
    return checkpoint.prune(entries(root, cached=True), remove, keep_last, keep_every, log, before)


def sweep(root: str, log: Log = print) -> list[str]:
    """Remove the step prefixes without a manifest: saves a kill (or a failed node) interrupted."""
    gone = []
    for url in step_dirs(root):
        if MANIFEST not in listing(url):
            remove(url)
            gone.append(url.name)
    if gone:
        log(f"checkpoint: removed {', '.join(gone)} from {root}: no manifest (a save that did not finish)")
    return gone
