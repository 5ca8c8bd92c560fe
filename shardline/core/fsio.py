"""Crash-safe file primitives.

Contract: a file that exists under its final name is complete. Writers go to a temp name in the
same directory (`.<name>.tmp-<pid>`), fsync the data, rename over the final name, then fsync the
directory so the rename itself survives a power cut. `remove_temps` sweeps what a killed writer
left behind; nothing else ever looks at temp names. `read_record` reads a JSON file the line wrote
back, checked: damage is one line naming the file and what rebuilds it, never a traceback.

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

from shardline import __version__
from shardline.core import chaos
from shardline.core.errors import BadInput

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
    except BaseException as e:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(e, OSError) and e.filename is None and e.errno is not None:
            # fsync's and write's faults name no file: the one being written is what the user must hear of
            raise OSError(e.errno, e.strerror, str(final)) from e
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


def read_record(path: str | os.PathLike, remedy: str, kind: type = dict, keys: dict[str, Any] | None = None,
                version: int | None = None, shown: object = None) -> Any:
    """A JSON file the line wrote, read back and checked: it parses, is a `kind`, has no other
    `format_version` than `version` when that is given (none counts as 1), and holds each of `keys`
    ({field: type or tuple of types}). Anything else (empty, truncated, the wrong type, another
    format) is one BadInput line naming the file (`shown`, else `path`), what is wrong and `remedy`;
    a missing file stays FileNotFoundError, which each caller words as the step not yet taken."""
    where = path if shown is None else shown
    with open(path, "rb") as f:
        data = f.read()
    return parse_record(data, where, remedy, kind, keys, version)


def parse_record(data: bytes, where: object, remedy: str, kind: type = dict, keys: dict[str, Any] | None = None,
                 version: int | None = None) -> Any:
    """`read_record` of bytes already read (fetched from object storage: `where` is their URL)."""
    try:
        value = json.loads(data)
    except ValueError as e:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not text
        what = "empty" if not data.strip() else (
            f"not valid JSON ({e.msg}: line {e.lineno} column {e.colno}; truncated or damaged)"
            if isinstance(e, json.JSONDecodeError) else "not UTF-8 text (damaged)")
        raise BadInput(f"{where}: {what}; {remedy}") from None
    if not isinstance(value, kind):
        raise BadInput(f"{where}: holds a JSON {json_type(value)}, not {_a(json_type(kind()))}; {remedy}")
    if isinstance(value, dict) and version is not None and (found := value.get("format_version", 1)) != version:
        raise BadInput(f"{where}: format_version {found!r}, but this shardline ({__version__}) reads format "
                       f"{version}; {remedy}, or read it with the shardline release that wrote it")
    return check_fields(value, keys or {}, where, remedy)


def check_fields(value: dict, keys: dict[str, Any], where: object, remedy: str, within: str = "") -> dict:
    """`value` when it holds each of `keys` ({field: type or tuple of types}); else BadInput naming
    `where`, the field (inside `within`, e.g. "shards[3]") and `remedy`."""
    for key, types in keys.items():
        name = f"{within}.{key}" if within else key
        if not isinstance(value, dict):
            raise BadInput(f"{where}: {within} is a JSON {json_type(value)}, not an object; {remedy}")
        if key not in value:
            raise BadInput(f"{where}: no field {name!r}; {remedy}")
        if not isinstance(value[key], types) or (isinstance(value[key], bool) and bool not in _tuple(types)):
            wanted = " or ".join(dict.fromkeys(_a(json_type(t())) for t in _tuple(types)))
            raise BadInput(f"{where}: field {name!r} is a JSON {json_type(value[key])}, not {wanted}; {remedy}")
    return value


def _a(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (a bool is not a number here)."""
    for t, name in ((bool, "boolean"), (dict, "object"), (list, "array"), (str, "string"), ((int, float), "number")):
        if isinstance(value, t):
            return name
    return "null"


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
