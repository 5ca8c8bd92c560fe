"""The one retry policy of every read and write of a remote file: HTTP sources, store objects,
streamed shards, push-shards, a bucket's staged parts.

Contract:
- `Policy` is the settings of a params section (`download`, `store`): `attempts` tries in a row
  without progress, `budget_s` seconds without progress (failed tries and the waits between them),
  exponential backoff from `backoff_s` capped at `max_backoff_s`, +/- `jitter` of each delay drawn
  from a seeded rng (`rng_for`: one sequence per object, the same on every run), `timeout_s` per
  request (connect, and each read of a body). A try that makes progress (adds bytes to what is
  held) resets both counts, so a big object on a link that drops now and then still arrives.
- `transient(exc)`: whether another try may cure `exc`. The network's faults and the store's
  5xx/throttling answers are, as the store clients raise them after their own retries (botocore's
  connection and read-timeout errors, aiohttp's payload errors, s3fs's OSErrors for 500 and 503, a
  response checksum that failed); a missing object, a refused credential or a bad URL are not.
- `Patience.failed` waits before the next try, or raises the one line that ends the fetch: the
  object, the tries, the last error, and the params fields that would give it more patience.
- `call` runs a request until it returns, retrying transient faults under a `Patience`.
- `s3_options(policy)`: the storage options that give s3fs the policy's timeouts and leave the body
  retries to the caller's loop (which resumes by Range and knows the expected size); botocore keeps
  its own retries of 500, 503 SlowDown and connection faults before a body, tuned as AWS documents
  it (AWS_MAX_ATTEMPTS, AWS_RETRY_MODE).
Design: docs/data.md (Retries).
"""

from __future__ import annotations

import errno
import random
import time
import zlib
from dataclasses import dataclass
from typing import Callable, TypeVar

from shardline.core.errors import DownloadError, ShardlineError, is_transient

T = TypeVar("T")

# What the store clients raise for a fault of the network or the store, by class name: botocore's
# ConnectionClosedError, EndpointConnectionError, ReadTimeoutError, ResponseStreamingError,
# IncompleteReadError, FlexibleChecksumError; aiohttp's ClientPayloadError, ServerDisconnectedError;
# urllib3's ProtocolError; fsspec's FSTimeoutError. Names, not imports: none of them is needed to
# run the line, and each library has several.
_TRANSIENT_NAMES = ("Connection", "Timeout", "Throttl", "SlowDown", "ServerError", "Payload", "Streaming",
                    "IncompleteRead", "Checksum", "Disconnected", "ProtocolError", "ServiceUnavailable",
                    "InternalError", "RequestTimeout")
# s3fs turns a 500 InternalError into EREMOTEIO and a 503 into EBUSY once botocore has given up
_STORE_ERRNOS = frozenset({getattr(errno, "EREMOTEIO", errno.EIO), errno.EBUSY, errno.EAGAIN})


class ShortAnswer(ConnectionError):
    """The store's answer ended before what it must hold (a range's bytes, a listing's fields): a
    connection cut where HTTP could not tell, e.g. by an intermediary that dropped the length."""


@dataclass(frozen=True)
class Policy:
    attempts: int = 8          # tries in a row without progress before giving up
    backoff_s: float = 0.5     # first delay; doubles each fruitless try
    max_backoff_s: float = 30.0
    timeout_s: float = 30.0    # connect and read (each read of a body) timeout per request
    budget_s: float = 900.0    # seconds without progress (failed tries and waits) before giving up
    jitter: float = 0.5        # +/- fraction of each delay, drawn from the rng
    section: str = "download"  # the params section these come from: the give-up line names its fields


STORE = Policy(section="store")  # the store section's defaults, where no params are at hand


def of(section, name: str) -> Policy:
    """The policy params section `section` (named `name` in params.yaml) sets."""
    return Policy(attempts=section.attempts, backoff_s=section.backoff_s, max_backoff_s=section.max_backoff_s,
                  timeout_s=section.timeout_s, budget_s=section.budget_s, section=name)


def rng_for(what: str) -> random.Random:
    """The jitter of `what`'s retries: seeded by its name, so a run's waits can be replayed."""
    return random.Random(zlib.crc32(what.encode()))


def transient(exc: BaseException) -> bool:
    """Whether another try may cure `exc` (module docstring)."""
    if isinstance(exc, ShardlineError) or is_transient(exc):
        return is_transient(exc)
    if isinstance(exc, FileNotFoundError | PermissionError):
        return False
    if isinstance(exc, OSError) and exc.errno in _STORE_ERRNOS:
        return True
    response = getattr(exc, "response", None)
    code = str((response.get("Error") or {}).get("Code", "")) if isinstance(response, dict) else ""
    if code in ("500", "502", "503", "504", "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"):
        return True
    name = type(exc).__name__
    return any(w in name for w in _TRANSIENT_NAMES)


def one_line(exc: BaseException) -> str:
    """`exc` as `Type: message` on one line (store clients' messages may span several)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class Patience:
    """The retry budget of one object (module docstring). `progress()` measures what is held (the
    bytes of a part file, of a stream); a failure after it grew starts the counts afresh."""

    def __init__(self, what: str, policy: Policy, *, progress: Callable[[], int] = lambda: 0,
                 rng: random.Random | None = None, sleep: Callable[[float], None] = time.sleep,
                 say: Callable[[str], None] = lambda _: None, clock: Callable[[], float] = time.monotonic,
                 error: type[DownloadError] = DownloadError, kept: str = ""):
        self.what, self.policy, self.progress, self.sleep, self.say = what, policy, progress, sleep, say
        self.rng, self.clock, self.error, self.kept = rng or rng_for(what), clock, error, kept
        self.high, self.streak, self.since = progress(), 0, clock()

    def failed(self, tries: int, cause: BaseException) -> None:
        """Wait before the next try, or raise the transient error that ends the fetch."""
        held, now = self.progress(), self.clock()
        if held > self.high:
            self.high, self.streak, self.since = held, 0, now
        self.streak += 1
        p, spent = self.policy, now - self.since
        if self.streak >= p.attempts or spent >= p.budget_s:
            raise self.error(
                f"{self.what}: giving up after {tries} attempts ({self.streak} in a row without progress, "
                f"{spent:.1f}s); last error {one_line(cause)}; run again later{self.kept}, or allow more with "
                f"{p.section}.attempts ({p.attempts}) and {p.section}.budget_s ({p.budget_s:g})",
                transient=True) from cause
        wait = min(delay(p, self.streak, cause, self.rng), max(p.budget_s - spent, 0.0))
        self.say(f"{self.what}: attempt {tries} failed ({one_line(cause)}); retry in {wait:.2f}s")
        self.sleep(wait)


def delay(policy: Policy, streak: int, exc: BaseException, rng: random.Random) -> float:
    """The wait after the `streak`-th fruitless try: the server's Retry-After when it gave seconds
    (capped), else exponential backoff with jitter."""
    hint = (getattr(exc, "retry_after", None) or "").strip()
    if hint.isdigit():  # the HTTP-date form falls back to our own backoff
        return min(float(hint), policy.max_backoff_s)
    base = min(policy.backoff_s * 2 ** min(max(streak - 1, 0), 60), policy.max_backoff_s)
    return max(0.0, base * (1 + rng.uniform(-policy.jitter, policy.jitter)))


def call(what: str, fn: Callable[[], T], policy: Policy, *, say: Callable[[str], None] = lambda _: None,
         sleep: Callable[[float], None] = time.sleep, error: type[DownloadError] = DownloadError) -> T:
    """`fn()`, tried again on transient faults as `Patience` allows; any other error is raised as is."""
    patience, tries = Patience(what, policy, sleep=sleep, say=say, error=error), 0
    while True:
        tries += 1
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - the store's client raises its own types
            if not transient(e):
                raise
            patience.failed(tries, e)


def s3_options(policy: Policy) -> dict:
    """fsspec storage options for s3:// under `policy` (module docstring)."""
    return {"config_kwargs": {"connect_timeout": policy.timeout_s, "read_timeout": policy.timeout_s}}


S3FS_TRIES = 1  # s3fs's own tries of a body read (its class default: 5, restarting the block, unbudgeted)
