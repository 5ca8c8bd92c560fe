"""Error types. Every error says what is wrong, where, and what to do.

`transient` tells orchestrators whether a retry can help (network blips, busy locks, EIO);
deterministic errors (bad params, corrupt input) must fail fast instead.

An OSError on a path is turned into its one line here and nowhere else: `os_error_line` says,
by errno, what the fault is and what to do (ENOSPC, EDQUOT, EACCES, EPERM, EROFS, ENOENT, ...),
naming the path and, when given, the field or argument that chose it. `on_path` raises it as a
`PathError` (a BadInput) around the work on a path a user chose (OUT_DIR, loader.cache_dir,
push-shards' URI); the command line uses the same line for any other OSError.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Iterator


class ShardlineError(Exception):
    """Base class. `transient` marks faults that a retry may cure."""

    transient = False


class ConfigError(ShardlineError):
    """params.yaml is invalid; the message lists every problem with its dotted path."""


class BadInput(ShardlineError):
    """Input data cannot be used as given (file named, remedy given)."""


class DownloadError(ShardlineError):
    """A source could not be fetched."""

    def __init__(self, msg: str, *, transient: bool = False):
        super().__init__(msg)
        self.transient = transient


class ChecksumMismatch(DownloadError):
    """A fetched or stored file does not have the sha256 it must have."""


class ShardCorrupt(ShardlineError):
    """A shard on disk does not match its index (hash or size)."""


TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.EBUSY, errno.ETIMEDOUT,
                              errno.ECONNRESET, errno.ECONNREFUSED, errno.EINTR})


def is_transient(exc: BaseException) -> bool:
    """True when retrying the failed work may succeed."""
    if isinstance(exc, ShardlineError):
        return exc.transient
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError):
        return exc.errno in TRANSIENT_ERRNOS
    return False


# errno -> (what it is, what to do); `{path}` is the path as the user knows it. ENOSPC keeps the
# wording tests/integration/test_sharded.py and docs/scaling.md quote.
_OS_LINES = {
    errno.ENOSPC: ("no space left on the device while writing {path}", "free space and re-run the same command "
                   "(finished parts and the last valid checkpoint are kept; nothing half-written is)"),
    errno.EDQUOT: ("{path}: disk quota exceeded", "free space under your quota (or have it raised), or pick a "
                   "path on another file system, and re-run the same command"),
    errno.EACCES: ("{path}: permission denied", "pick a path you may use, or fix its permissions"),
    errno.EPERM: ("{path}: operation not permitted", "pick another path (this one refuses it whatever its "
                  "permissions)"),
    errno.EROFS: ("{path}: read-only file system", "pick a path on a writable file system"),
    errno.ENOENT: ("{path}: no such file or directory", "check the path (relative paths are the project root's)"),
    errno.ENOTDIR: ("{path}: a part of the path is a file, not a directory{culprit}", "check the path"),
    errno.EEXIST: ("{path}: something is already there{culprit}", "pick another path, or move it away"),
    errno.EISDIR: ("{path}: is a directory, where a file is needed", "name the file"),
    errno.ENAMETOOLONG: ("{path}: file name too long", "pick a shorter path"),
    errno.ELOOP: ("{path}: too many levels of symbolic links", "check the links on the path"),
    errno.EMFILE: ("{path}: too many open files", "raise the limit (ulimit -n) and re-run the same command"),
}


def os_error_line(exc: OSError, path: str | os.PathLike | None = None, what: str | None = None) -> str:
    """One line for `exc`: the path (`path`, else the one the error names), the field or argument
    `what` that chose it, what happened and what to do."""
    where = str(path if path is not None else exc.filename or "data/")
    if what:
        where = f"{what} {where}"
    # the file the fault met, when another than the path named (ENOTDIR, EEXIST: a file in the way)
    culprit = f" ({exc.filename})" if exc.filename is not None and str(exc.filename) != str(path) else ""
    if exc.errno in _OS_LINES:
        fault, remedy = _OS_LINES[exc.errno]
        return f"{fault.format(path=where, culprit=culprit if path is not None else '')}; {remedy}"
    cause = (exc.strerror or str(exc) or type(exc).__name__) + culprit
    remedy = "re-run the same command (the fault may pass)" if is_transient(exc) else "check the path and re-run"
    return f"{where}: {cause}; {remedy}"


class PathError(BadInput):
    """An OSError on a path a user chose, as one line naming it (`os_error_line`)."""

    def __init__(self, msg: str, *, transient: bool = False):
        super().__init__(msg)
        self.transient = transient


@contextlib.contextmanager
def on_path(path: str | os.PathLike, what: str | None = None) -> Iterator[None]:
    """Any OSError inside becomes a PathError naming `path` (and `what` chose it); a transient
    one stays transient, so orchestrators still retry it."""
    try:
        yield
    except OSError as e:
        raise PathError(os_error_line(e, path, what), transient=is_transient(e)) from e
