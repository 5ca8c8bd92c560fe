"""HTTP download with resume, retry and checksum.

Contract: `fetch(url, dest)` either leaves a complete, fsynced `dest` (sha256-checked when a hash
is given) or raises; `dest` never holds a partial body. Bytes in flight live in `<dest>.part`,
which outlives failed tries and killed processes, so the next try (or run) continues it with a
`Range` request instead of starting over. The server's ETag for the body goes into
`<dest>.part.json` before any byte of it, and stays beside `dest` after promotion until the
download stage's manifest records it: a resume asks `If-Range` with it (a changed file comes back
whole, never spliced), and a run killed between the file and the manifest still knows which
version of the file it holds. Errors follow shardline.core.errors: DownloadError with
transient=True when a later retry may help (network, timeouts, 5xx, 429), transient=False when it
cannot (other 4xx, bad URL), ChecksumMismatch when the body is not the one params.yaml names.

Budget: shardline.core.retry's, with the part file's size as progress: `attempts` tries in a row
(and `budget_s` seconds) that add no new bytes to the part. A try that extends the part resets
both and the backoff, so a large file on a link that drops every few hundred MB still finishes,
while a dead server fails after `attempts` requests. Sleep and randomness are injectable so
tests never wait.
"""

from __future__ import annotations

import http.client
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests
import urllib3

from shardline.core import chaos, fsio, retry
from shardline.core.errors import ChecksumMismatch, DownloadError
from shardline.core.filenames import partial_note_of, partial_of

_CHUNK = 1 << 16
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED = re.compile(r"bytes\s+\*/(\d+)")
# urllib3/http.client errors are listed because a few slip through requests unwrapped.
_NET_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
               urllib3.exceptions.HTTPError, http.client.HTTPException)
_REMEDY = "check the uri in params.yaml sources"


RetryPolicy = retry.Policy  # the one policy (shardline.core.retry); the download section sets it


@dataclass(frozen=True)
class FetchResult:
    path: Path        # the final file
    bytes: int        # size of the final file
    sha256: str
    fetched: int      # bytes received over the network this call (resumes included)
    attempts: int     # requests made this call (0 when dest was already there)
    resumed: int      # how many times a Range request continued a partial file
    etag: str | None = None  # the server's ETag for the body, when it sent one


class _Retry(Exception):
    """A try failed in a way another try may cure; `retry_after` is the server's hint, if any."""

    def __init__(self, cause: str, retry_after: str | None = None):
        super().__init__(cause)
        self.retry_after = retry_after


@dataclass
class _Counters:
    fetched: int = 0
    resumed: int = 0
    etag: str | None = None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _truncate(path: Path) -> None:
    open(path, "wb").close()


def noted_etag(dest: Path, url: str) -> str | None:
    """The ETag the note beside `dest` holds for `url` (None without one)."""
    try:
        note = fsio.read_json(partial_note_of(dest))
        return note["etag"] if note.get("url") == url else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _try_once(session: requests.Session, url: str, dest: Path, timeout: float,
              n: _Counters, say: Callable[[str], None]) -> None:
    """One GET continuing `dest`'s part; returns only when the part holds the whole body."""
    part = partial_of(dest)
    offset, known = _size(part), noted_etag(dest, url)
    # Range offsets count raw bytes, so the body must arrive exactly as stored on the server.
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if known:
            headers["If-Range"] = known  # another version of the file comes back whole (200)
    with session.get(url, headers=headers, stream=True, timeout=timeout) as r:
        code = r.status_code
        if code == 416 and offset:
            m = _UNSATISFIED.fullmatch(r.headers.get("Content-Range", "").strip())
            if m is None or int(m[1]) == offset:
                return  # nothing lies past what we hold; the sha256 check still judges the part
            _truncate(part)
            raise _Retry(f"HTTP 416: {part.name} holds {offset} bytes, the file has {m[1]}")
        if code == 429 or code >= 500:
            raise _Retry(f"HTTP {code} {r.reason}", r.headers.get("Retry-After"))
        if code == 206:
            cr = r.headers.get("Content-Range", "").strip()
            m = _CONTENT_RANGE.fullmatch(cr)
            if m is None or int(m[1]) != offset:
                _truncate(part)  # bytes from an unknown position would corrupt the file
                raise _Retry(f"HTTP 206 with Content-Range {cr!r} for Range bytes={offset}-")
            mode, end, total = "ab", int(m[2]) + 1, None if m[3] == "*" else int(m[3])
            if offset:
                n.resumed += 1
                say(f"{url}: resuming at byte {offset}")
        elif code == 200:
            if offset:
                say(f"{url}: server ignored Range; starting over")
            cl = r.headers.get("Content-Length", "")
            mode, end = "wb", int(cl) if cl.isdigit() else None
            total = end
        else:
            raise DownloadError(f"{url}: HTTP {code} {r.reason}; {_REMEDY}")
        etag = r.headers.get("ETag")
        if etag != known and (etag or mode == "wb"):  # the note names the body the part holds, before any byte
            fsio.write_json(partial_note_of(dest), {"url": url, "etag": etag})
        n.etag = etag or n.etag
        with open(part, mode) as raw:
            f = chaos.partway(raw, "download.body")  # a kill while the .part grows
            for chunk in r.iter_content(_CHUNK):
                f.write(chunk)
                n.fetched += len(chunk)
    size = _size(part)
    if end is not None and size < end:
        raise _Retry(f"connection closed early: {size} of {end} bytes")
    if total is not None and size > total:
        _truncate(part)
        raise _Retry(f"{part.name} grew to {size} bytes, past the file size {total}")
    if total is not None and size < total:
        raise _Retry(f"server sent a partial range: {size} of {total} bytes")


def promote(part: Path, dest: Path) -> None:
    """The whole part becomes `dest`, durably (it may come from a killed run whose writes never hit disk)."""
    with open(part, "rb") as f:
        os.fsync(f.fileno())
    os.replace(part, dest)
    fsio.fsync_dir(dest.parent)


def fetch(url: str, dest: Path, *, sha256: str | None = None, policy: RetryPolicy = RetryPolicy(),
          rng: random.Random | None = None, sleep: Callable[[float], None] = time.sleep,
          log: Callable[[str], None] | None = None) -> FetchResult:
    """Download `url` to `dest` (see module docstring); skip when `dest` already matches."""
    dest = Path(dest)
    say = log or (lambda msg: None)
    want = sha256.lower() if sha256 else None
    if dest.exists():
        have = fsio.sha256_file(dest)
        if want is None or have == want:
            return FetchResult(dest, dest.stat().st_size, have, 0, 0, 0, noted_etag(dest, url))
        say(f"{dest}: sha256 {have} is not {want}; fetching again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = partial_of(dest)
    n = _Counters()
    patience = retry.Patience(url, policy, progress=lambda: _size(part), rng=rng, sleep=sleep, say=say,
                              kept=f" ({part.name} is kept and resumes)")
    tries = 0
    with requests.Session() as session:
        while True:
            tries += 1
            try:
                _try_once(session, url, dest, policy.timeout_s, n, say)
                break
            except (_Retry, *_NET_ERRORS) as exc:
                patience.failed(tries, exc)
            except requests.RequestException as exc:
                # Malformed URL, unknown scheme, redirect loop: no retry will fix those.
                raise DownloadError(f"{url}: {exc}; {_REMEDY}") from exc
    have = fsio.sha256_file(part)
    if want is not None and have != want:
        part.unlink()  # a wrong body must not be resumed by the next run
        partial_note_of(dest).unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{dest}: sha256 mismatch for {url}: expected {want}, got {have}; "
            f"fix this source's sha256 in params.yaml (sources[].sha256) or the server's file")
    promote(part, dest)
    return FetchResult(dest, dest.stat().st_size, have, n.fetched, tries, n.resumed, n.etag)


def head_etag(url: str, timeout: float) -> str | None:
    """The server's ETag for `url` now (a HEAD request), or None when it sends none or cannot be
    asked: then the file on disk stands."""
    try:
        r = requests.head(url, timeout=timeout, allow_redirects=True, headers={"Accept-Encoding": "identity"})
    except requests.RequestException:
        return None
    return r.headers.get("ETag") if r.ok else None
