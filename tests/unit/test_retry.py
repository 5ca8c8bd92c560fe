"""shardline.core.retry and transfer.agreed: what is retried, how long, and when bytes are called wrong.
The faults on the wire are tests/integration/test_store_faults.py's (a real proxy); here, the rules."""

from __future__ import annotations

import errno

import pytest

from shardline.core import retry, transfer
from shardline.core.errors import BadInput, ChecksumMismatch, DownloadError


class ClientPayloadError(Exception):  # the names aiohttp and botocore give these faults
    pass


class FlexibleChecksumError(Exception):
    pass


class ClientError(Exception):
    def __init__(self, code: str):
        super().__init__(code)
        self.response = {"Error": {"Code": code}}


@pytest.mark.parametrize("exc, cured", [
    (ConnectionResetError(104, "reset"), True), (TimeoutError(), True), (retry.ShortAnswer("cut"), True),
    (OSError(errno.EREMOTEIO, "We encountered an internal error."), True),  # s3fs's 500 after botocore's retries
    (OSError(errno.EBUSY, "Please reduce your request rate."), True),       # and its 503 SlowDown
    (ClientPayloadError("Response payload is not completed"), True), (FlexibleChecksumError("crc32"), True),
    (ClientError("SlowDown"), True), (ClientError("500"), True),
    (ClientError("NoSuchKey"), False), (ClientError("AccessDenied"), False),
    (FileNotFoundError("gone"), False), (PermissionError(errno.EACCES, "denied"), False),
    (OSError(errno.ENOSPC, "full"), False), (ValueError("bad url"), False),
    (DownloadError("x", transient=True), True), (DownloadError("x"), False),
    (ChecksumMismatch("sha256 mismatch"), False),  # a name with 'Checksum' in it, yet ours and final
])
def test_what_another_try_may_cure(exc, cured):
    assert retry.transient(exc) is cured


def _fails(what: str, policy: retry.Policy) -> tuple[list[float], DownloadError]:
    """Five failures of `what`, the third try bringing bytes: the waits between them and the give-up."""
    held, waits = [0], []
    p = retry.Patience(what, policy, progress=lambda: held[0], sleep=waits.append)
    p.failed(1, TimeoutError())
    p.failed(2, TimeoutError())
    held[0] = 10  # the third try brought bytes: not fruitless
    p.failed(3, TimeoutError())
    p.failed(4, TimeoutError())
    with pytest.raises(DownloadError) as e:
        p.failed(5, ConnectionResetError(104, "Connection reset by peer"))
    return waits, e.value


def test_a_try_that_makes_progress_starts_the_count_afresh_and_the_waits_are_seeded():
    policy = retry.Policy(attempts=3, backoff_s=1.0, max_backoff_s=3.0, jitter=0.5, section="store")
    waits, e = _fails("s3://b/x", policy)
    assert len(waits) == 4 and all(0.5 * b <= w <= 1.5 * b for w, b in zip(waits, (1, 2, 1, 2)))  # backoff restarted
    assert _fails("s3://b/x", policy)[0] == waits != _fails("s3://b/y", policy)[0]  # jitter seeded by the name
    msg = str(e)
    assert e.transient and "\n" not in msg
    assert msg.startswith("s3://b/x: giving up after 5 attempts (3 in a row without progress, ")
    assert "last error ConnectionResetError: [Errno 104] Connection reset by peer" in msg
    assert msg.endswith("allow more with store.attempts (3) and store.budget_s (900)")


def test_the_budget_bounds_the_seconds_without_progress_whatever_attempts_allow():
    now, waits = [0.0], []
    policy = retry.Policy(attempts=100, backoff_s=4.0, max_backoff_s=4.0, jitter=0.0, budget_s=10.0)
    p = retry.Patience("https://x/a", policy, sleep=lambda s: (waits.append(s), now.__setitem__(0, now[0] + s)),
                       clock=lambda: now[0])
    p.failed(1, TimeoutError())
    p.failed(2, TimeoutError())
    p.failed(3, TimeoutError())  # 8 s spent: the last wait is cut to the 2 s left
    with pytest.raises(DownloadError, match=r"giving up after 4 attempts \(4 in a row without progress, 10.0s\)"):
        p.failed(4, TimeoutError())
    assert waits == [4.0, 4.0, 2.0]


def test_bytes_are_called_wrong_only_when_a_second_fetch_brings_the_same():
    answers = iter([b"cut sho", b"the bytes", b"xx", b"yy", b"xx"])

    def judge(data: bytes):
        return transfer.digest(data), None if data == b"the bytes" else BadInput(f"{data!r} is not it")

    quiet = dict(policy=retry.Policy(attempts=5), sleep=lambda _: None)
    assert transfer.agreed("u", lambda: next(answers), judge, **quiet) == b"the bytes"  # a fault on the way, then it
    with pytest.raises(BadInput, match="b'xx' is not it"):  # xx, yy, xx: the store holds xx
        transfer.agreed("u", lambda: next(answers), judge, **quiet)
    different = (bytes([i]) for i in range(100))
    with pytest.raises(DownloadError) as e:  # never the same twice: a fault that did not pass, not bad data
        transfer.agreed("u", lambda: next(different), judge, policy=retry.Policy(attempts=3), sleep=lambda _: None)
    assert e.value.transient and "giving up after 3 attempts" in str(e.value) and "WrongBytes" in str(e.value)
