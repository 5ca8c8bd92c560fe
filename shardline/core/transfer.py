"""Objects copied out of and into a store (any fsspec filesystem), under shardline.core.retry's policy.

Contract:
- `read(fs, path, write, start, end, ...)` passes the bytes [start, end) of `path` to `write`, in
  order, each byte once: ranged reads of at most CHUNK bytes, each starting at the first byte not
  yet held. A fault mid-body (a reset, a stall past the read timeout, a short read, a body that ends
  early without a sign) costs one request for the rest, never a restart; an answer that ends before
  `end` is such a fault, not the end of the object. Transient faults are retried under the policy
  (`retry.Patience`, progress = the bytes held); any other error is raised as the client raises it.
- `whole(fs, path, ...)`: the object's bytes, its size asked first, so a cut answer is a fault too.
- `agreed(what, fetch, judge, ...)` is the rule for data checked on arrival (a sha256, a format):
  a fetch whose bytes fail the check is fetched again, and the data is called wrong only when a
  second fetch brings the same bytes (the same digest): `judge`'s error is raised then. A different
  wrong answer is a transient fault, retried under the policy, and named in the give-up line.
Any other request (a HEAD, a PUT of a whole file: whole or absent) is `retry.call`.
"""

from __future__ import annotations

import hashlib
import time
from typing import Callable, TypeVar

from shardline.core import retry
from shardline.core.errors import DownloadError

CHUNK = 8 << 20  # bytes per ranged read: S3's advice for throughput, and what one retry re-asks at most
T = TypeVar("T")


class WrongBytes(Exception):
    """The bytes that arrived fail their check, and no earlier fetch brought the same ones."""


def read(fs, path: str, write: Callable[[bytes], object], start: int, end: int, *, policy: retry.Policy,
         what: str, error: type[DownloadError] = DownloadError, kept: str = "", version: str | None = None,
         say: Callable[[str], None] = lambda _: None, sleep: Callable[[float], None] = time.sleep) -> None:
    """Pass bytes [start, end) of `path` to `write` (module docstring)."""
    pos = start
    patience = retry.Patience(what, policy, progress=lambda: pos, sleep=sleep, say=say, error=error, kept=kept)
    pin = {"version_id": version} if version is not None else {}
    tries = 0
    while pos < end:
        tries += 1
        stop = min(pos + CHUNK, end)
        try:
            data = fs.cat_file(path, start=pos, end=stop, **pin)
            if len(data) > stop - pos:
                raise error(f"{what}: the store answered {len(data)} bytes for the {stop - pos} asked (bytes "
                            f"{pos}-{stop - 1}): it ignores Range requests, which this copy needs")
            if not data:
                raise retry.ShortAnswer(f"the answer for bytes {pos}-{stop - 1} of {end} was empty")
        except Exception as e:  # noqa: BLE001 - the store's client raises its own types
            if not retry.transient(e):
                raise
            patience.failed(tries, e)
            continue
        write(data)
        pos += len(data)  # a short answer is kept: the next request asks for the rest


def size(fs, path: str, *, policy: retry.Policy, what: str, error: type[DownloadError] = DownloadError) -> int:
    """The object's size, as the store says it now (its listing cache left aside)."""
    def ask() -> int:
        fs.invalidate_cache(path)
        return int(fs.info(path)["size"])

    return retry.call(what, ask, policy, error=error)


def whole(fs, path: str, *, policy: retry.Policy, what: str, error: type[DownloadError] = DownloadError) -> bytes:
    """All of `path`'s bytes (module docstring)."""
    out = bytearray()
    read(fs, path, out.extend, 0, size(fs, path, policy=policy, what=what, error=error), policy=policy,
         what=what, error=error)
    return bytes(out)


def agreed(what: str, fetch: Callable[[], T], judge: Callable[[T], tuple[str, Exception | None]], *,
           policy: retry.Policy, error: type[DownloadError] = DownloadError,
           sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] = lambda _: None) -> T:
    """`fetch()` until `judge` accepts what came (module docstring). `judge(value)` is (a digest of the
    bytes, None) when they pass, (their digest, the error that calls them wrong) when not."""
    seen: set[str] = set()
    patience = retry.Patience(what, policy, sleep=sleep, say=say, error=error)
    tries = 0
    while True:
        tries += 1
        value = fetch()
        digest, wrong = judge(value)
        if wrong is None:
            return value
        if digest in seen:
            raise wrong  # two fetches brought the same bytes: the store holds them
        seen.add(digest)
        patience.failed(tries, WrongBytes(f"what arrived fails its check ({wrong}); fetched again to tell a fault "
                                          "on the way from the store's own bytes"))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
