"""A local Prefect server on 127.0.0.1 with its state (SQLite) under a folder of ours.

Contract: `local_server(home)` starts `prefect server start` bound to loopback with analytics
off, waits until /api/health answers, yields the environment a client needs
(PREFECT_API_URL, PREFECT_HOME, ...), and stops the server on exit. Tests and benchmarks use
it without the UI; `shardline serve` (for people) and the UI's own test with it, on the same
port as the API (http://127.0.0.1:<port>/).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

OFFLINE = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "DVC_NO_ANALYTICS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(home: str | Path, port: int) -> dict[str, str]:
    return {**os.environ, **OFFLINE, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
            "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port)}


@contextlib.contextmanager
def local_server(home: str | Path, port: int | None = None, timeout: float = 120,
                 ui: bool = False) -> Iterator[dict[str, str]]:
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    # the UI only when asked: only a person (`shardline serve`) or the UI's own test opens it
    env = {**server_env(home, port), "PREFECT_UI_ENABLED": str(ui).lower()}
    prefect = Path(sys.executable).with_name("prefect")
    with open(home / "server.log", "ab") as log:
        proc = subprocess.Popen([str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"prefect server did not start; see {home / 'server.log'}") from None
                time.sleep(0.3)
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
