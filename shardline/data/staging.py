"""Parts on workers that share nothing with the driver but an object store (`parts.store`).

Contract: with a `Staging` (the store's URL and the project root), the frame runs each part so:
- the driver puts the part's inputs (`inputs(work)`: the files under the project its work
  reads) in the store, at `<store>/<path under the project>`, before submitting it; a file it
  put or took before, unchanged since (same size and mtime: Layout.staged_record), is not put again;
- a worker fetches them into a scratch folder of its own (`.shardline-parts/` in its working
  directory), runs the part there on the same relative paths (`rebase`), and puts each file
  the part wrote in the store, then the part's done-marker, last: a part in the store is whole
  or absent. A worker killed mid-part leaves no marker; the part is run again (Dask gives it
  to another worker), over what the killed one left;
- the driver takes a finished part's files back into its own data/ folder (each to a temp
  name, its size checked against the marker, renamed), then writes the marker there: the frame's
  rule, files first, marker last. A part whose marker the store holds with the current key
  (a driver killed after the worker finished) is taken, not run again.
A span of a big plain file is fetched as that byte range (and the file's first bytes, where a
compression magic would be) into a sparse file of the file's size: a part reads only its span.
Every request to the store is retried on transient faults under `Staging.policy` (params' store
section); a file arrives with every byte the store's size names (shardline.core.transfer), so a
connection cut mid-body is continued, never taken for the file's end or for a changed store.
The driver keeps every file (DVC versions them there; phase 2 and training read them there):
the store is what the workers share. Credentials and endpoint come from each process's
environment (shardline.core.stores).

Design: docs/scaling.md (Workers that share only a bucket).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

from shardline.core import fsio, retry, stores, transfer
from shardline.core.errors import BadInput

SCRATCH = ".shardline-parts"
_HEAD = 16  # bytes kept at a span's file start: a compression magic is there


def of(params, layout) -> "Staging | None":
    """The staging params.yaml's `parts.store` asks for, or None (workers share data/); a store whose
    bucket does not exist is refused here, before any part is planned."""
    store = params.parts.store
    if not store:
        return None
    policy = retry.of(params.store, "store")
    stores.check_bucket(store, "parts.store", policy)
    return Staging(store, str(layout.root), policy)


@dataclasses.dataclass(frozen=True)
class Staging:
    store: str  # the store URL: s3://bucket/prefix, any fsspec URL
    root: str   # the project root on the driver
    policy: retry.Policy = retry.STORE  # params.store: retries and timeouts of every request to the store

    def remote(self, path: str | Path) -> str:
        return f"{self.store.rstrip('/')}/{self.rel(path)}"

    def rel(self, path: str | Path) -> str:
        try:
            return Path(path).resolve().relative_to(Path(self.root).resolve()).as_posix()
        except ValueError:
            raise BadInput(f"{path}: a part reads it and it lies outside the project; with parts.store the workers "
                           "see only the store: put the file inside the project") from None

    def fs(self):
        return stores.filesystem(self.store, self.policy)[0]


def rebase(obj: Any, old: str, new: str) -> Any:
    """`obj` (a part's work: dataclasses, tuples, strings and paths) with every path under `old`
    moved under `new`."""
    if isinstance(obj, Path) and _under(str(obj), old):
        return Path(new) / Path(obj).relative_to(old)
    if isinstance(obj, str) and _under(obj, old):
        return str(Path(new) / Path(obj).relative_to(old))
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(rebase(x, old, new) for x in obj)
    if isinstance(obj, tuple):  # a NamedTuple
        return type(obj)(*(rebase(x, old, new) for x in obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: rebase(getattr(obj, f.name), old, new)
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Record:
    """The driver's note of which of its files the store holds (put or taken, unchanged since)."""

    def __init__(self, staging: Staging):
        from shardline.core.layout import Layout

        self.path = Layout.at(staging.root).staged_record  # (size, mtime_ns) per file the store holds
        try:
            held = fsio.read_json(self.path)
        except (OSError, ValueError):
            held = {}
        # a saving only: a note damaged or of another type holds nothing, and every file is put again
        self.held: dict[str, list[int]] = held if isinstance(held, dict) else {}

    def fresh(self, rel: str, local: Path) -> bool:
        st = local.stat()
        return self.held.get(rel) == [st.st_size, st.st_mtime_ns]

    def note(self, rel: str, local: Path) -> None:
        st = local.stat()
        self.held[rel] = [st.st_size, st.st_mtime_ns]

    def save(self) -> None:
        fsio.write_json(self.path, self.held)


def put_inputs(staging: Staging, files: Iterable[str | Path], record: Record, fs=None) -> int:
    """Put the driver's `files` in the store unless it holds them already; how many were put."""
    fs = fs or staging.fs()
    sent = 0
    for f in dict.fromkeys(map(str, files)):
        local, rel = Path(f), staging.rel(f)
        if not local.is_file():
            raise BadInput(f"{rel}: a part needs it and the driver does not have it; re-run the stage that makes it")
        if record.fresh(rel, local):
            continue
        put(fs, local, staging.remote(local), staging.policy)
        record.note(rel, local)
        sent += 1
    return sent


def put(fs, local: str | Path, remote: str, policy: retry.Policy = retry.STORE) -> None:
    """`local` at `remote`: a PUT is whole or absent, so a failed one is simply sent again."""
    def send() -> None:
        if getattr(fs, "local_file", False):  # a filesystem store needs its folders; a bucket has none, and
            fs.makedirs(fs._parent(remote), exist_ok=True)  # s3fs's makedirs would make a missing bucket
        fs.put_file(str(local), remote)

    retry.call(remote, send, policy)


def cat(fs, remote: str, policy: retry.Policy = retry.STORE) -> bytes:
    """The bytes at `remote`, all of them (a cut answer is retried); FileNotFoundError when absent."""
    return transfer.whole(fs, remote, policy=policy, what=remote)


def remove(fs, remote: str, policy: retry.Policy = retry.STORE) -> None:
    retry.call(remote, lambda: fs.rm(remote), policy)


def fetch(fs, remote: str, local: Path, span: tuple[int, int] | None = None,
          policy: retry.Policy = retry.STORE) -> None:
    """`remote` at `local` (whole, or the span in a sparse file); every byte the store's size names
    arrives (shardline.core.transfer: a fault mid-body is continued by Range, never taken for the end)."""
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f"{local.name}.{os.getpid()}.fetch")
    size = transfer.size(fs, remote, policy=policy, what=remote)
    start, end = (0, size) if span is None else span
    end = size if end < 0 else min(end, size)
    with open(tmp, "wb") as f:
        f.truncate(size)  # a span's file is sparse: the part reads only its span
        for a, b in ((0, min(_HEAD, size)), (start, end)) if span is not None else ((0, size),):
            f.seek(a)
            transfer.read(fs, remote, f.write, a, b, policy=policy, what=remote)
    os.replace(tmp, local)


def scratch(name: str) -> Path:
    """A fresh scratch folder for one piece of work, in this worker's working directory (what a
    killed worker left there, under its process id, goes first)."""
    top = Path.cwd() / SCRATCH
    for old in top.glob("*-*"):
        try:
            os.kill(int(old.name.rsplit("-", 1)[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except (ValueError, PermissionError):
            pass
    path = top / f"{name.replace('/', '_')}-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    return path


class Worker:
    """What runs a part on a worker: fetch its inputs, do it in a scratch folder of its own, put
    its files, its marker last. Picklable (a few hundred bytes): it travels with every task."""

    def __init__(self, staging: Staging, do: Callable):
        self.staging, self.do = staging, do

    def __call__(self, part, needs: list[tuple[str, tuple[int, int] | None]]) -> dict:
        """`needs`: the part's inputs on the driver, each with the byte span it reads (None: all)."""
        from shardline.core import chaos

        st = self.staging
        here = scratch(part.name)
        fs = st.fs()
        try:
            mine = dataclasses.replace(part, work=rebase(part.work, st.root, str(here)),
                                       marker=rebase(part.marker, st.root, str(here)))
            for f, span in needs:
                fetch(fs, st.remote(f), Path(rebase(str(f), st.root, str(here))), span, st.policy)
            files, stats = self.do(mine)
            where = Path(mine.marker).parent
            marker = {"key": part.key, "files": {str(Path(f).relative_to(where)): Path(f).stat().st_size for f in files},
                      "stats": stats}
            for f in files:  # every file first: the marker vouches for them
                put(fs, f, st.remote(Path(st.root) / Path(f).relative_to(here)), st.policy)
            chaos.point(f"{part.stage}.part")  # its files are in the store, its marker is not: not done
            fsio.write_json(mine.marker, marker)
            put(fs, mine.marker, st.remote(part.marker), st.policy)
            chaos.done(part.stage, part.name)
            return marker
        finally:
            shutil.rmtree(here, ignore_errors=True)


def take(staging: Staging, part, marker: dict, record: Record, fs=None) -> dict:
    """Bring a finished part's files from the store into the driver's data/, each checked against
    its size in `marker`, then write the marker (last)."""
    fs = fs or staging.fs()
    where = Path(part.marker).parent
    for name, size in marker["files"].items():
        local = where / name
        fetch(fs, staging.remote(local), local, policy=staging.policy)
        if local.stat().st_size != size:  # every byte the store holds arrived: the store's object has this size
            raise BadInput(f"{staging.remote(local)}: {local.stat().st_size} bytes arrived, the part's marker says "
                           f"{size}; the store changed under the stage: re-run it")
        record.note(staging.rel(local), local)
    fsio.write_json(part.marker, marker)
    return marker


def finished_in_store(staging: Staging, part, fs=None) -> dict | None:
    """The part's marker in the store when it holds the current key and every file it lists at its
    size; else None."""
    import json

    fs = fs or staging.fs()
    try:
        marker = json.loads(cat(fs, staging.remote(part.marker), staging.policy))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("key") != part.key:
        return None
    where = Path(part.marker).parent
    for name, size in marker.get("files", {}).items():
        try:
            if transfer.size(fs, staging.remote(where / name), policy=staging.policy,
                             what=staging.remote(where / name)) != size:
                return None
        except FileNotFoundError:
            return None
    return marker
