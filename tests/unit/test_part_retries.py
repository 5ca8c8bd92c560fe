"""A part on a cluster is retried after a transient fault only (shardline.orchestration.tasks.runners._retried): a real
refused connection on 127.0.0.1 is retried, a deterministic error is raised at once, and the
last transient fault is raised once the retries are spent."""

from __future__ import annotations

import socket

import pytest

from shardline.orchestration.tasks.runners import _retried


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _flaky(fails: int, calls: list):
    port = _closed_port()

    def part(x):
        calls.append(x)
        if len(calls) <= fails:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # refused: nothing listens
        return x * 2

    return part


def test_a_refused_connection_is_retried_until_the_part_succeeds():
    calls: list = []
    assert _retried(_flaky(2, calls), 21, retries=2, delay=0) == 42
    assert calls == [21, 21, 21]


def test_the_last_transient_fault_is_raised_when_the_retries_are_spent():
    calls: list = []
    with pytest.raises(ConnectionRefusedError):
        _retried(_flaky(5, calls), 1, retries=2, delay=0)
    assert len(calls) == 3


def test_a_deterministic_error_is_never_retried():
    calls: list = []

    def part(x):
        calls.append(x)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        _retried(part, 1, retries=3, delay=0)
    assert calls == [1]
