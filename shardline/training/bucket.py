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
- Every request goes through shardline.training.bucketio, under the store section's retry policy
  the handle carries (a `URL`: a str with a Path's `.name` and `/`, picklable, so ranks share it):
  objects put whole (a temp file, hashed as written, then PUT; again after a fault), reads
  continued by Range. `write_json` (the rollback ledger) relies on a PUT being whole or absent.
- A transient fault is never called a torn or corrupt checkpoint: an object whose sha256 differs
  from its manifest's is read again, and called corrupt only when two reads agree; a fault that
  outlasts the policy is StoreError, one line naming the object and the last error.
- `listing`, `cat` and `get` are the reads shardline.training.storage.fetch copies a checkpoint
  into a folder with.
- Credentials and endpoint come from the environment (shardline.core.stores); `check` proves the
  store writable at a run's start; a store's failure is StoreError, one line naming the URL.

Design: docs/architecture.md (Data contracts: Checkpoints); docs/scaling.md (Nodes that share
only a bucket).
"""

from __future__ import annotations

import io
import json
from contextlib import suppress
from typing import Any, Callable

from shardline.core import chaos, fsio, transfer
from shardline.core.errors import ShardlineError
from shardline.core.layout import DCP, MANIFEST, TENSORS, TRAIN_STATE, step_dir, step_of
from shardline.training import checkpoint, sharded
from shardline.training.bucketio import (URL, StoreError, cat, check, get, listing, put, remove, sha256,  # noqa: F401
                                         step_dirs, write_json)
from shardline.training.records import Lineage, Manifest

Log = Callable[[str], None]


def step_url(root: str, step: int) -> URL:
    return URL(root) / step_dir("", step).name


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
            files[name] = put(url / name, lambda out, obj=obj: torch.save(obj, out))
        files[TRAIN_STATE] = put(url / TRAIN_STATE,
                                 lambda out: out.write(json.dumps(state, indent=2, sort_keys=True).encode()))
        chaos.point("checkpoint.files", str(step))
        manifest = checkpoint.manifest_of(step, files, lineage, eval, shards).to_json()
        body = json.dumps(manifest, sort_keys=True).encode()
        put(url / MANIFEST, lambda out: out.write(body))  # last: from here on the checkpoint is valid
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
    result = _verify(URL(url), body)
    if result[0]:
        _verified[key] = result
    return result


class _Differs(Exception):
    """An object's bytes, read twice alike, are not the ones its manifest names."""


def _verify(url: URL, body: bytes) -> tuple[bool, str]:
    try:  # every byte of the manifest arrived (transfer.whole): unreadable is what the store holds
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
        try:  # a read whose hash differs may have met a fault on the way: only the same bytes again are the store's
            transfer.agreed(url / name, lambda name=name: sha256(url / name, stored[name]),
                            lambda got, want=meta.sha256: (got, None if got == want else _Differs()),
                            policy=url.policy, error=StoreError)
        except _Differs:
            return False, f"{name} sha256 differs from the manifest (corrupt)"
    if manifest.format == "sharded":
        why = sharded.files_check(url, manifest, {n for n in stored if n.startswith(f"{DCP}/")})
        if why:
            return False, why
    return True, "ok"


def read_json(url: str, name: str) -> Any:
    return json.loads(cat(url, name))


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
