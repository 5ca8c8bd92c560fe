"""Error types. Every error says what is wrong, where, and what to do.

`transient` tells orchestrators whether a retry can help (network blips, busy locks, EIO);
deterministic errors (bad params, corrupt input) must fail fast instead.
"""

from __future__ import annotations

import errno


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
