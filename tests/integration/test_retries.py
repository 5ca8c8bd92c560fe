"""Prefect retries only what a retry can cure: real Prefect server, real HTTP faults."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import make_project, run
from harness.servers import FlakyServer

pytestmark = pytest.mark.slow
FLOW = "from shardline.orchestration.flows.stage_flows import run_flow; run_flow('download', '.')"


def _download_flow(tmp_path, url, prefect_server):
    make_project(tmp_path, [{"name": "web", "uri": url, "format": "txt"}],
                 download={"attempts": 1, "backoff_s": 0}, pipeline={"retries": 2, "retry_delay_s": 0})
    return run([sys.executable, "-c", FLOW], tmp_path, check=False, env=prefect_server)


def test_transient_failure_is_retried_by_prefect(tmp_path, prefect_server):
    with FlakyServer({"/a.txt": b"some text\n" * 50}, p_503=1.0) as srv:
        r = _download_flow(tmp_path, srv.url("/a.txt"), prefect_server)
    assert r.returncode != 0
    assert srv.requests["/a.txt"] == 3, r.stderr  # 1 try + 2 Prefect retries
    assert "503" in r.stderr


def test_deterministic_failure_fails_fast(tmp_path, prefect_server):
    with FlakyServer({}) as srv:
        r = _download_flow(tmp_path, srv.url("/missing.txt"), prefect_server)
    assert r.returncode != 0
    assert srv.requests["/missing.txt"] == 1, r.stderr  # a 404 is never retried
    assert "404" in r.stderr and "check the uri in params.yaml" in r.stderr
