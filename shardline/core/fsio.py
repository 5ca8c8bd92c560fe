"""Crash-safe file primitives.

Contract: a file that exists under its final name is complete. Writers go to a temp name in the
same directory (`.<name>.tmp-<pid>`), fsync the data, rename over the final name, then fsync the
directory so the rename itself survives a power cut. `remove_temps` sweeps what a killed writer
left behind; nothing else ever looks at temp names.

Design: docs/architecture.md (Crash safety).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
import shutil
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from shardline.core import chaos

TMP_MARK = ".tmp-"
_CHUNK = 1 << 20


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(final: Path, unique: bool = False) -> Path:
    """`.<name>.tmp-<pid>`; `unique` adds a random tag, for writers of one file that may race
    inside one process (two shard caches fetching the same shard)."""
    tag = f"-{uuid.uuid4().hex[:8]}" if unique else ""
    return final.with_name(f".{final.name}{TMP_MARK}{os.getpid()}{tag}")


@contextlib.contextmanager
def atomic_writer(final: str | os.PathLike, unique: bool = False, point: str | None = None) -> Iterator[BinaryIO]:
    """Open a binary temp file that becomes `final` only if the block completes; `point` names
    the chaos kill point every write of it is (shardline.core.chaos.partway)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(final, unique)
    f = open(tmp, "wb")
    try:
        yield chaos.partway(f, point) if point else f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def final_path(path: str | os.PathLike) -> Path:
    """The file a temp name stands for (`.<name>.tmp-<pid>[-tag]` -> `<name>`); any other path as
    it is. An error met while writing a temp names the file the user knows."""
    path = Path(path)
    if path.name.startswith(".") and TMP_MARK in path.name:
        return path.with_name(path.name[1:path.name.rindex(TMP_MARK)])
    return path


def write_bytes(final: str | os.PathLike, data: bytes, point: str | None = None) -> None:
    with atomic_writer(final, point=point) as f:
        f.write(data)


def write_json(final: str | os.PathLike, obj: Any) -> None:
    write_bytes(final, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def read_json(path: str | os.PathLike) -> Any:
    with open(path, "rb") as f:
        return json.load(f)


def copy_file(src: str | os.PathLike, final: str | os.PathLike) -> str:
    """Copy atomically; return the sha256 of the bytes copied (one read of the source)."""
    h = hashlib.sha256()
    with open(src, "rb") as fin, atomic_writer(final) as fout:
        while chunk := fin.read(_CHUNK):
            h.update(chunk)
            fout.write(chunk)
    return h.hexdigest()


class Hashing:
    """A write-only stream over `f` that hashes what passes through: one pass over the bytes, no
    copy, no second read. `tell` is the bytes written so far (DCP's offsets in a new file)."""

    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def write(self, b) -> int:
        self.h.update(b)
        self.n += memoryview(b).nbytes
        return self.f.write(b)

    def tell(self) -> int:
        return self.n

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()

    def meta(self) -> dict:
        """What a manifest records of the bytes written: {bytes, sha256}."""
        return {"bytes": self.n, "sha256": self.h.hexdigest()}


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def stable_hash(obj: Any) -> str:
    """sha256 of a JSON-able value, independent of dict order."""
    return sha256_bytes(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def prune(root: str | os.PathLike, keep: set[Path]) -> None:
    """Delete files under `root` that are not in `keep`, then empty folders: outputs the
    current params no longer produce must not linger in a DVC-tracked directory."""
    for p in sorted(Path(root).rglob("*"), reverse=True):
        if p.is_file() and p not in keep:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()


def prune_dirs(root: str | os.PathLike, names: set[str]) -> None:
    """Delete the sub-folders of `root` not named in `names` (sources removed from params)."""
    for p in Path(root).iterdir():
        if p.is_dir() and p.name not in names:
            shutil.rmtree(p)


def remove_temps(root: str | os.PathLike) -> int:
    """Delete temp files a killed writer left under `root`; return how many."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            if name.startswith(".") and TMP_MARK in name:
                p = Path(dirpath, name)
                shutil.rmtree(p) if p.is_dir() else p.unlink()
                n += 1
    return n
