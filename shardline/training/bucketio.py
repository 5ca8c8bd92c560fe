"""The requests of a checkpoint store (train.checkpoint_uri; shardline.training.bucket keeps the
checkpoint contract over them), each under the store section's retry policy (shardline.core.retry).

Contract:
- A handle is a `URL`: a str with a Path's `.name` and `/`, and the `policy` its requests run under
  (params.store's, set where the run's store is made; a plain str gets retry.STORE), which `/`
  passes on. Picklable, so ranks share it, policy and all.
- Reads continue by Range after a fault (shardline.core.transfer): `cat` and `get` deliver every
  byte the store's size names, `sha256` hashes the bytes its listing names; an answer cut short is a
  fault, retried, never taken for the object's end. Listings bypass fsspec's cache (other nodes
  write the same prefix) and are asked again on a fault.
- Writes are whole: `put` fills a local temp file (hashed as it is written: no second read), then
  PUTs it, again after a transient fault (a PUT is whole or absent); `remove` deletes a prefix's
  manifest first, then the rest; `check` puts and deletes one object.
- `dcp_filesystem(policy)` is the same for DCP's fsspec writer and reader (a sharded checkpoint's
  dcp/, shardline.training.sharded): each object written to a temp file, hashed on the way, then
  put whole; each read fetched in ranges into a temp file DCP reads; its other requests retried.
- A failure is StoreError, one line: a fault that outlasts the policy names the object, the tries
  and the last error (transient); any other names the URL and what to check. A read's
  FileNotFoundError stays one (no such object: its callers' answer).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any, Callable

from shardline.core import fsio, retry, transfer
from shardline.core.errors import DownloadError, ShardlineError
from shardline.core.layout import MANIFEST, step_of
from shardline.core.stores import filesystem


class URL(str):
    """A place in the store: the URL itself, with a Path's `.name` and `/`, and the retry policy
    of its requests (`policy`: the given one, else the one `url` carries, else retry.STORE)."""

    policy: retry.Policy

    def __new__(cls, url: str, policy: retry.Policy | None = None) -> "URL":
        self = super().__new__(cls, url)
        self.policy = policy or getattr(url, "policy", None) or retry.STORE
        return self

    @property
    def name(self) -> str:
        return self.rstrip("/").rpartition("/")[2]

    def __truediv__(self, other: str) -> "URL":
        return URL(f"{self.rstrip('/')}/{other}", self.policy)


class StoreError(DownloadError):
    """The checkpoint store failed (a missing bucket, the network, credentials); names the URL."""


def _store_op(writes: bool):
    """A decorator: the function's store failures as StoreError (a fault that outlasted the retry
    policy is one already, transient). A read's FileNotFoundError stays one (no such object: its
    callers' answer); a write's is the bucket's."""
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
                raise StoreError(f"train.checkpoint_uri {url}: {retry.one_line(e)}; check that the bucket exists, "
                                 "the network, and the AWS_* credentials and endpoint in the environment",
                                 transient=retry.transient(e)) from e
        return wrapped
    return decorate


_read, _write = _store_op(writes=False), _store_op(writes=True)


def _open(url: str):
    """(filesystem, path) of `url`, with its policy's timeouts (its body retries are ours: retry.s3_options)."""
    return filesystem(url, URL(url).policy)


def _call(url: str, request: Callable[[], Any]) -> Any:
    """`request()`, a request about `url`, retried on transient faults under its policy."""
    return retry.call(str(url), request, URL(url).policy, error=StoreError)


@_read
def listing(url: str) -> dict[str, int]:
    """Every object under `url`, by its name below it, with its size: fresh from the store."""
    fs, p = _open(url)

    def ask() -> dict[str, int]:
        fs.invalidate_cache(p)
        try:
            found = fs.find(p, detail=True)
        except FileNotFoundError:
            return {}
        return {k[len(p) + 1:]: info["size"] for k, info in found.items() if k.startswith(p + "/")}

    return _call(url, ask)


@_read
def step_dirs(root: str) -> list[URL]:
    """The step-N prefixes under `root`, oldest first (their names sort by step)."""
    fs, p = _open(root)

    def ask() -> list[str]:
        fs.invalidate_cache(p)
        try:
            return [n.rstrip("/").rpartition("/")[2] for n in fs.ls(p, detail=False)]
        except FileNotFoundError:
            return []

    return [URL(root) / n for n in sorted(set(_call(root, ask))) if step_of(n) is not None]


def _folder(fs, p: str) -> None:
    """A local file:// store needs the folder an object goes in; a store has none to make."""
    if getattr(fs, "local_file", False):
        fs.makedirs(p.rpartition("/")[0], exist_ok=True)


@_write
def put(url: str, fill: Callable[[Any], None]) -> dict:
    """Object `url`, as `fill(out)` writes it: into a temp file first, so a failed PUT is sent again
    whole (never half an object, never a second pass of `fill`)."""
    fs, p = _open(url)
    with tempfile.NamedTemporaryFile(prefix="shardline-put-") as tmp:
        out = fsio.Hashing(tmp)
        fill(out)
        tmp.flush()

        def send() -> None:
            _folder(fs, p)
            fs.put_file(tmp.name, p)

        _call(url, send)
    return out.meta()  # the object is stored


@_read
def sha256(url: URL, size: int) -> str:
    """The sha256 of the `size` bytes of object `url`, read in ranges (none held twice)."""
    url = URL(url)
    fs, p = _open(url)
    h = hashlib.sha256()
    transfer.read(fs, p, h.update, 0, size, policy=url.policy, what=str(url), error=StoreError)
    return h.hexdigest()


@_read
def cat(url: str, name: str) -> bytes:
    """Every byte of object `name` under `url` (a cut answer is continued, not taken for the end)."""
    where = URL(url) / name
    fs, p = _open(where)
    return transfer.whole(fs, p, policy=where.policy, what=str(where), error=StoreError)


@_read
def get(url: str, local: Path) -> None:
    """Object `url` into local file `local`, every byte the store's size names."""
    url = URL(url)
    fs, p = _open(url)
    size = transfer.size(fs, p, policy=url.policy, what=str(url), error=StoreError)
    with open(local, "wb") as f:
        transfer.read(fs, p, f.write, 0, size, policy=url.policy, what=str(url), error=StoreError)


@_write
def write_json(root: str, name: str, obj: Any) -> None:
    """One object, put whole (atomic on an object store)."""
    put(URL(root) / name, lambda out: out.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()))


@_write
def remove(url: str) -> None:
    """The manifest first (invalid from here on, whatever happens next), then every object."""
    fs, p = _open(url)

    def manifest() -> None:
        with suppress(FileNotFoundError):
            fs.rm_file(f"{p}/{MANIFEST}")

    def listing() -> list[str]:
        fs.invalidate_cache(p)
        try:
            return fs.find(p)
        except FileNotFoundError:
            return []

    _call(URL(url) / MANIFEST, manifest)
    # one listing, then one delete per object, each its own retried call: fs.rm(recursive) is a listing,
    # a HEAD and another listing before any delete, which a store failing a third of its requests
    # got through in one try of three (seed 13 failed it twelve times in a row)
    for key in _call(url, listing):
        _call(URL(url) / key[len(p) + 1:], lambda key=key: fs.rm_file(key))
    if getattr(fs, "local_file", False):  # a folder of a file:// store is no object: it goes too
        with suppress(FileNotFoundError):
            fs.rm(p, recursive=True)


@_write
def check(root: str) -> None:
    """Fail at the start, not at the first save: put and delete one object under `root`."""
    probe = URL(root) / f".probe-{os.getpid()}"
    fs, p = _open(probe)
    put(probe, lambda out: None)
    _call(probe, lambda: fs.rm_file(p))


@functools.cache
def _dcp_filesystem_class():
    """The class of `dcp_filesystem`, made on first use: DCP's imports cost ~1.5 s (shardline.training.sharded)."""
    import contextlib

    from torch.distributed.checkpoint._fsspec_filesystem import FileSystem

    class Stored(FileSystem):
        """DCP's fsspec file system on a store, every request under `policy` (shardline.core.retry).
        A write fills a local temp file, hashed on the way (`written`: name -> {bytes, sha256}, so a
        rank's file list costs no second read), then is put whole, again after a fault; a read
        fetches the object in ranges continued after a fault (shardline.core.transfer) into a temp
        file DCP reads."""

        def __init__(self, policy: retry.Policy):
            super().__init__()
            self.policy, self.written = policy, {}

        def init_path(self, path, **kwargs):
            self.fs = filesystem(str(path), self.policy)[0]
            return path

        def _call(self, path, request):
            return retry.call(str(path), request, self.policy, error=StoreError)

        @contextlib.contextmanager
        def create_stream(self, path, mode: str):
            path = str(path)
            fd, local = tempfile.mkstemp(prefix="shardline-dcp-")
            try:
                with open(fd, "w+b") as tmp:  # DCP closes a stream it wrote: the file stays till the end
                    if "w" not in mode:
                        size = transfer.size(self.fs, path, policy=self.policy, what=path, error=StoreError)
                        transfer.read(self.fs, path, tmp.write, 0, size, policy=self.policy, what=path,
                                      error=StoreError)
                        tmp.seek(0)
                        yield tmp
                        return
                    out = fsio.Hashing(tmp)
                    yield out
                self._call(path, lambda: self.fs.put_file(local, path))  # closed: every byte is in `local`
                self.written[path.rsplit("/", 1)[-1]] = out.meta()  # the object is stored
            finally:
                os.unlink(local)

        def rename(self, path, new_path) -> None:  # .metadata.tmp -> .metadata (on a store: a copy, a delete)
            src, dst = str(path), str(new_path)

            def there() -> bool:  # a try that got through the delete left no source: the move is done
                self.fs.invalidate_cache(src)
                return self.fs.exists(src)

            # each request its own retried call: a move retried whole must get all of them through in one
            # try, which a store failing a third of its requests does in one try of four (12 tries: ~4% fail)
            if self._call(path, there):
                self._call(new_path, lambda: self.fs.cp_file(src, dst))
                self._call(path, lambda: self.fs.rm_file(src))
            self.written[str(new_path).rsplit("/", 1)[-1]] = self.written.pop(str(path).rsplit("/", 1)[-1])

        def exists(self, path) -> bool:
            return self._call(path, lambda: self.fs.exists(str(path)))

        def rm_file(self, path) -> None:
            self._call(path, lambda: self.fs.rm(str(path)))

        def mkdir(self, path) -> None:
            self._call(path, lambda: self.fs.makedirs(str(path), exist_ok=True))

    return Stored


def dcp_filesystem(policy: retry.Policy):
    """DCP's fsspec file system for a checkpoint's dcp/ on a store, every request under `policy`."""
    return _dcp_filesystem_class()(policy)
