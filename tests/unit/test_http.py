"""shardline.data.http against a real loopback HTTP server that misbehaves on purpose."""

from __future__ import annotations

import hashlib
import random
import socket
import time

import pytest

from shardline.core.errors import ChecksumMismatch, DownloadError
from shardline.data.http import RetryPolicy, fetch
from harness.servers import FlakyServer

NOSLEEP = dict(sleep=lambda s: None, rng=random.Random(0))


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def blob() -> bytes:
    return random.Random(42).randbytes(2_000_000)


def test_drops_and_503s_resume_instead_of_restarting(tmp_path, blob):
    with FlakyServer({"/a.bin": blob}, seed=7, p_drop=0.3, p_503=0.3) as srv:
        dest = tmp_path / "raw" / "a.bin"
        res = fetch(srv.url("/a.bin"), dest, sha256=sha(blob), **NOSLEEP)
    assert dest.read_bytes() == blob and res.sha256 == sha(blob) and res.bytes == len(blob)
    assert res.resumed >= 1 and res.attempts == srv.requests["/a.bin"] > 1
    assert srv.sent["/a.bin"] <= 1.5 * len(blob)
    # a short read loses what urllib3 had buffered but not yet returned, so fetched <= sent
    assert len(blob) <= res.fetched <= srv.sent["/a.bin"]
    assert not dest.with_name("a.bin.part").exists()


def test_wrong_sha256_leaves_nothing(tmp_path, blob):
    wrong = "3f2a" + "0" * 60
    with FlakyServer({"/a.bin": blob}) as srv:
        dest = tmp_path / "a.bin"
        with pytest.raises(ChecksumMismatch) as ei:
            fetch(srv.url("/a.bin"), dest, sha256=wrong, **NOSLEEP)
    msg = str(ei.value)
    assert wrong in msg and sha(blob) in msg and str(dest) in msg and "params.yaml" in msg
    assert not dest.exists() and not dest.with_name("a.bin.part").exists()


def test_404_fails_fast_and_not_transient(tmp_path):
    with FlakyServer({}) as srv:
        with pytest.raises(DownloadError) as ei:
            fetch(srv.url("/missing.txt"), tmp_path / "m.txt", **NOSLEEP)
    assert srv.requests["/missing.txt"] == 1
    assert ei.value.transient is False
    assert "404" in str(ei.value) and "/missing.txt" in str(ei.value) and "params.yaml" in str(ei.value)


def test_always_503_spends_all_attempts(tmp_path):
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=5, backoff_s=0.5, max_backoff_s=3.0, jitter=0.5)
    with FlakyServer({"/a": b"x"}, p_503=1.0) as srv:
        with pytest.raises(DownloadError) as ei:
            fetch(srv.url("/a"), tmp_path / "a", policy=policy, sleep=sleeps.append,
                  rng=random.Random(1))
    assert srv.requests["/a"] == 5
    assert ei.value.transient is True and "5 attempts" in str(ei.value) and "503" in str(ei.value)
    assert len(sleeps) == 4
    for i, s in enumerate(sleeps):  # doubling backoff, capped, with +/-50% jitter
        base = min(0.5 * 2 ** i, 3.0)
        assert 0.5 * base <= s <= 1.5 * base


def test_existing_part_is_continued_with_range(tmp_path, blob):
    half = len(blob) // 2
    dest = tmp_path / "a.bin"
    dest.with_name("a.bin.part").write_bytes(blob[:half])
    with FlakyServer({"/a.bin": blob}) as srv:
        res = fetch(srv.url("/a.bin"), dest, sha256=sha(blob), **NOSLEEP)
    assert srv.ranges == [f"bytes={half}-"]
    assert srv.sent["/a.bin"] == len(blob) - half == res.fetched
    assert res.resumed == 1 and dest.read_bytes() == blob


def test_server_ignoring_range_still_completes(tmp_path, blob):
    dest = tmp_path / "a.bin"
    dest.with_name("a.bin.part").write_bytes(b"stale garbage" * 1000)
    with FlakyServer({"/a.bin": blob}, seed=3, p_drop=0.3, ignore_range=True) as srv:
        res = fetch(srv.url("/a.bin"), dest, sha256=sha(blob), **NOSLEEP)
    assert dest.read_bytes() == blob and res.resumed == 0
    assert srv.ranges[0] == "bytes=13000-"


def test_complete_dest_is_skipped_without_a_request(tmp_path, blob):
    dest = tmp_path / "a.bin"
    dest.write_bytes(blob)
    with FlakyServer({"/a.bin": blob}) as srv:
        res = fetch(srv.url("/a.bin"), dest, sha256=sha(blob), **NOSLEEP)
        res2 = fetch(srv.url("/a.bin"), dest, **NOSLEEP)
    assert sum(srv.requests.values()) == 0
    assert res.fetched == res2.fetched == 0 and res.sha256 == sha(blob) == res2.sha256


def test_dest_with_wrong_content_is_fetched_again(tmp_path):
    dest = tmp_path / "a.txt"
    dest.write_bytes(b"old")
    with FlakyServer({"/a.txt": b"new"}) as srv:
        res = fetch(srv.url("/a.txt"), dest, sha256=sha(b"new"), **NOSLEEP)
    assert dest.read_bytes() == b"new" and res.fetched == 3 and srv.requests["/a.txt"] == 1


@pytest.mark.timeout(10)
def test_silent_server_times_out(tmp_path):
    with socket.create_server(("127.0.0.1", 0), backlog=8) as sock:  # listens, never accepts
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/a"
        t0 = time.monotonic()
        with pytest.raises(DownloadError) as ei:
            fetch(url, tmp_path / "a", policy=RetryPolicy(attempts=2, timeout_s=0.5), **NOSLEEP)
    assert ei.value.transient is True and "2 attempts" in str(ei.value)
    assert time.monotonic() - t0 < 3
    assert not (tmp_path / "a").exists()


def test_429_honours_retry_after_capped(tmp_path):
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=3, max_backoff_s=4.0)
    with FlakyServer({"/a": b"abc"}, p_429=1.0, retry_after="7") as srv:
        with pytest.raises(DownloadError) as ei:
            fetch(srv.url("/a"), tmp_path / "a", policy=policy, sleep=sleeps.append)
    assert sleeps == [4.0, 4.0] and srv.requests["/a"] == 3 and ei.value.transient
    srv2 = FlakyServer({"/a": b"abc"}, seed=1, p_429=0.5, retry_after="2")
    with srv2:
        sleeps.clear()
        res = fetch(srv2.url("/a"), tmp_path / "b", policy=RetryPolicy(attempts=20), sleep=sleeps.append)
    assert (tmp_path / "b").read_bytes() == b"abc" and sleeps == [2.0] * (res.attempts - 1)


def test_416_with_full_part_completes_without_body(tmp_path, blob):
    dest = tmp_path / "a.bin"
    dest.with_name("a.bin.part").write_bytes(blob)
    with FlakyServer({"/a.bin": blob}) as srv:
        res = fetch(srv.url("/a.bin"), dest, sha256=sha(blob), **NOSLEEP)
    assert dest.read_bytes() == blob and srv.sent["/a.bin"] == 0 and res.fetched == 0
    assert srv.ranges == [f"bytes={len(blob)}-"]


def test_a_process_killed_while_the_part_grows_is_continued_by_the_next(tmp_path, blob):
    """A real SIGKILL at the 3rd chunk of the body (chaos point download.body): the .part holds the
    bytes that reached it, and the next process asks only for the rest."""
    import os
    import signal
    import subprocess
    import sys

    dest = tmp_path / "out.bin"
    code = "import sys; from pathlib import Path; from shardline.data.http import fetch; fetch(sys.argv[1], Path(sys.argv[2]))"
    with FlakyServer({"/f": blob}) as srv:
        env = {**os.environ, "SHARDLINE_CHAOS": "download.body#3"}
        r = subprocess.run([sys.executable, "-c", code, srv.url("/f"), str(dest)], env=env)
        assert r.returncode == -signal.SIGKILL and not dest.exists()
        held = (tmp_path / "out.bin.part").stat().st_size
        assert 2 * 65536 < held < 3 * 65536  # two whole chunks and half of the third
        res = fetch(srv.url("/f"), dest)
        assert srv.ranges == [None, f"bytes={held}-"] and res.fetched == len(blob) - held
    assert dest.read_bytes() == blob
