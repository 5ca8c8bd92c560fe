"""A real S3 peer for tests and benches: `moto_server` on 127.0.0.1, a bucket made with boto3.

    with moto_s3("bucket") as env: ...   # env: os.environ plus the AWS_* settings that reach it

Nothing here mocks S3 in-process: clients speak HTTP to the server like to AWS (s3fs, boto3,
DVC's S3 remote). Credentials are moto's dummies, given through the environment only.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

BUCKET = "shardline-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_s3(bucket: str = BUCKET, timeout: float = 30.0) -> Iterator[dict]:
    """Start moto_server on a free loopback port, create `bucket`; yield the env that reaches it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server on {url} did not come up (exit {proc.poll()})") from None
                time.sleep(0.1)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_ENDPOINT_URL": url, "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
        client(env).create_bucket(Bucket=bucket)  # DVC and s3fs do not create buckets
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def client(env: dict):
    import boto3

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_DEFAULT_REGION"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])


def upload_dir(env: dict, local: Path, bucket: str, prefix: str) -> int:
    """Put every file under `local` at s3://bucket/prefix/<relative path>; return how many."""
    s3, n = client(env), 0
    for p in sorted(Path(local).rglob("*")):
        if p.is_file():
            s3.upload_file(str(p), bucket, f"{prefix}/{p.relative_to(local).as_posix()}")
            n += 1
    return n


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict]:
    """A moto S3 server for the module's tests; the env holds its endpoint and dummy credentials."""
    with moto_s3() as env:
        yield env


@pytest.fixture
def aws(s3_env, monkeypatch) -> Iterator[dict]:
    """s3_env applied to this process (restored afterwards), for in-process s3fs clients. fsspec
    keeps one S3FileSystem per set of arguments, its endpoint read from the environment when it
    was made: dropped before and after, or a client made for another module's server (another
    port, in the same pytest worker) would be handed to this test."""
    import s3fs

    for k, v in s3_env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_env
    s3fs.S3FileSystem.clear_instance_cache()


class CountingServer:
    """Answers 404 to anything on 127.0.0.1 and records each request: a stand-in metadata endpoint."""

    def __init__(self):
        self.requests: list[tuple[str, str]] = []
        srv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                srv.requests.append((self.command, self.path))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_PUT = do_POST = _any

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
