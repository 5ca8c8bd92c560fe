"""A fault-injecting HTTP proxy on 127.0.0.1 in front of an S3 endpoint (moto_server, harness/s3.py).

    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], seed=7, rate=0.25) as proxy:
        env = proxy.env(s3_env)          # the same env, its AWS_ENDPOINT_URL through the proxy

Real HTTP, as a store misbehaves on the wire; clients (s3fs, boto3, DVC) cannot tell it from S3:
- `500`: InternalError; `503`: SlowDown (S3's throttling answer), each a whole response with its
  XML error body; the request is not forwarded (nothing happens in the store);
- `reset`: the response's headers and part of its body, then a TCP RST;
- `stall`: the headers and part of the body, then silence for `stall_s` (a test sets its client's
  read timeout below it), then the connection closes;
- `short`: Content-Length promised, part of the body sent, the connection closed (a FIN);
- `cut` (not in the default schedule): the body without Content-Length, ended early by closing
  the connection: what an intermediary that drops the length does when its upstream dies. HTTP
  cannot tell it from the end of the body; only a length or a checksum known beforehand can.
"Part of the body" is none of it (right after the headers) for a quarter of the draws, else 1 to
len-1 bytes. Body faults fall on responses with a body of 2 bytes or more (GETs); an answer
without one (HEAD, PUT) gets reset or stall before its first byte, and no short or cut. A request
whose own body ends short of its length (its client killed mid-PUT) is dropped, as a store drops it.

The schedule is seeded and does not depend on thread timing: whether the n-th request for a
(method, path, Range) fails, how, and where its body is cut, is a hash of (seed, method, path,
Range, n), with probability `rate`. `persist(fault, match, times)` makes the next `times` requests
whose "METHOD path" holds `match` (all of them, when None) fail so: a store that stays broken;
`persist(None)` ends it. `log` holds (method, path, Range, fault or None) per request, in arrival order.

`intercept(proxy, decide)` lets a caller pick a request's fault before the schedule does, and
`killed(cmd, ..., when)` SIGKILLs a command's process group when the proxy receives the request
`when` names (`nth(match, k)`: the k-th whose "METHOD path" holds `match`; "" holds in every one).

Tests draw their seeds from one per test run (`session_seed`: SHARDLINE_FAULT_SEED when set, else
the clock's), printed in pytest's header, so CI tries other schedules each run and a failure is
replayed with the seed it printed; `seed_for(test)` is a test's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import http.server
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

FAULTS = ("500", "503", "reset", "stall", "short")  # the default schedule's
ALL = (*FAULTS, "cut")
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
        "server", "date"}  # the last two: this server's own
_ERRORS = {"500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Try again."),
           "503": (503, "Slow Down", "SlowDown", "Please reduce your request rate.")}


SEED_VAR = "SHARDLINE_FAULT_SEED"


def session_seed() -> int:
    """This test run's fault seed; put in the environment, so xdist's workers and child processes share it."""
    raw = os.environ.setdefault(SEED_VAR, str(time.time_ns() // 1000 % 1_000_000))
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{SEED_VAR}={raw!r}: give an integer (a seed a test run printed)") from None


def seed_for(test: str) -> int:
    """A test's own seed, from the run's."""
    return zlib.crc32(f"{session_seed()}:{test}".encode())


class _Quiet(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that gave up (a read timeout, a retry on another connection) is expected here."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class FaultProxy:
    """Forwards to `upstream` (http://host:port), injecting `faults` on a seeded schedule."""

    def __init__(self, upstream: str, *, seed: int, rate: float = 0.25, faults: tuple[str, ...] = FAULTS,
                 stall_s: float = 2.0):
        if unknown := set(faults) - set(ALL):
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {ALL}")
        up = urlsplit(upstream)
        self.upstream = (up.hostname, up.port)
        self.seed, self.rate, self.faults, self.stall_s = seed, rate, tuple(faults), stall_s
        self.lock = threading.Lock()
        self.seen: Counter[tuple] = Counter()
        self.log: list[tuple[str, str, str | None, str | None]] = []
        self.persisting: tuple[str | None, str, int | None, float | None] = (None, "", None, None)
        self.stopping = threading.Event()
        self.httpd = _Quiet(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def env(self, env: dict) -> dict:
        """`env` with its S3 endpoint through this proxy."""
        return {**env, "AWS_ENDPOINT_URL": self.url}

    def persist(self, fault: str | None, match: str = "", times: int | None = None, at: float | None = None) -> None:
        """The next `times` requests whose "METHOD path" holds `match` (all: None) get `fault`, bodies cut
        at fraction `at` (None: as drawn); `fault` None: back to the schedule."""
        if fault is not None and fault not in ALL:
            raise ValueError(f"unknown fault {fault!r}; known: {ALL}")
        with self.lock:
            self.persisting = (fault, match, times, at)

    def injected(self) -> Counter[str]:
        """How many of each fault were injected so far."""
        with self.lock:
            return Counter(f for *_, f in self.log if f)

    def __enter__(self) -> "FaultProxy":
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _draw(self, method: str, path: str, rng: str | None) -> tuple[str | None, float]:
        """(the fault for this request or None, where in its body to cut: a fraction); module docstring."""
        with self.lock:
            key = (method, path, rng)
            self.seen[key] += 1
            h = hashlib.sha256(repr((self.seed, *key, self.seen[key])).encode()).digest()
            roll, pick, at = struct.unpack("<QQQ", h[:24])
            where = 0.0 if at % 4 == 0 else (at >> 2) / 2**62
            fault, match, times, at = self.persisting
            if fault is not None and match in f"{method} {path}" and times != 0:
                self.persisting = (fault, match, None if times is None else times - 1, at)
                return fault, where if at is None else at
            return (self.faults[pick % len(self.faults)] if roll / 2**64 < self.rate else None), where

    def _record(self, method: str, path: str, rng: str | None, fault: str | None) -> None:
        with self.lock:
            self.log.append((method, path, rng, fault))

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPConnection | None = None

            def log_message(self, *args):
                pass

            def _body(self) -> bytes | None:
                """The request's body; None when the client went before sending all of it (killed
                mid-PUT): a store never takes a body short of its length, so nor is it forwarded."""
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while (line := self.rfile.readline()) and (size := int(line.split(b";")[0].strip() or b"0", 16)):
                        out += (got := self.rfile.read(size))
                        if len(got) < size:
                            return None
                        self.rfile.readline()
                    if not line:
                        return None
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers: moto reads an aws-chunked checksum from the body, not these
                    return bytes(out)
                want = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(want)
                return body if len(body) == want else None

            def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                for _ in range(2):  # a kept-alive upstream connection moto closed meanwhile: once more
                    if self.upstream is None:
                        self.upstream = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                    try:
                        self.upstream.request(self.command, self.path, body=body, headers=headers)
                        r = self.upstream.getresponse()
                        return r.status, r.reason, r.getheaders(), r.read()
                    except (http.client.HTTPException, OSError):
                        self.upstream.close()
                        self.upstream = None
                raise ConnectionError("the upstream store did not answer")

            def _error(self, fault: str) -> None:
                code, reason, name, msg = _ERRORS[fault]
                xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{name}</Code><Message>{msg}</Message>'
                       f"<Resource>{self.path.split('?')[0]}</Resource><RequestId>fault</RequestId></Error>").encode()
                self.send_response(code, reason)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(xml)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(xml)

            def _reset(self) -> None:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()  # linger 0: an RST, not a FIN
                self.close_connection = True

            def _stall(self) -> None:
                proxy.stopping.wait(proxy.stall_s)
                self.close_connection = True

            def _any(self):
                if (body := self._body()) is None:
                    self.close_connection = True
                    return
                rng, path = self.headers.get("Range"), self.path.split("?")[0]
                fault, where = proxy._draw(self.command, path, rng)
                if fault in _ERRORS:
                    proxy._record(self.command, path, rng, fault)
                    return self._error(fault)
                status, reason, headers, data = self._forward(body)
                sends_body = self.command != "HEAD" and len(data) >= 2
                if fault in ("short", "cut") and not sends_body:
                    fault = None  # nothing to cut short
                proxy._record(self.command, path, rng, fault)
                if fault in ("reset", "stall") and not sends_body:
                    return self._reset() if fault == "reset" else self._stall()
                self.send_response(status, reason)
                for k, v in headers:
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if fault == "cut":  # close-delimited: the end of the connection is the end of the body
                    self.send_header("Connection", "close")
                else:
                    length = dict((k.lower(), v) for k, v in headers).get("content-length", str(len(data)))
                    self.send_header("Content-Length", length if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault is None:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[:min(int(where * len(data)), len(data) - 1)])
                time.sleep(0.01)  # the bytes leave before the fault does
                if fault == "reset":
                    self._reset()
                elif fault == "stall":
                    self._stall()
                else:
                    self.close_connection = True  # short: Content-Length promised more; cut: none promised

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

            def finish(self):
                try:
                    super().finish()
                finally:
                    if self.upstream is not None:
                        self.upstream.close()

        return Handler


@contextlib.contextmanager
def intercept(proxy: FaultProxy, decide):
    """`decide(method, path, range)` picks a request's fault before the seed's schedule does (None:
    the schedule's)."""
    draw = proxy._draw

    def drawing(method: str, path: str, rng: str | None):
        fault = decide(method, path, rng)
        return (fault, 0.5) if fault else draw(method, path, rng)

    proxy._draw = drawing
    try:
        yield
    finally:
        del proxy._draw


def nth(match: str, k: int):
    """A `killed` trigger: the k-th request whose "METHOD path" holds `match`."""
    seen = [0]

    def when(request: str) -> bool:
        seen[0] += match in request
        return match in request and seen[0] == k

    return when


def killed(cmd: list[str], cwd: Path, env: dict, proxy: FaultProxy, when, timeout: float = 120) -> tuple[int, int, str]:
    """Run `cmd` under the proxy's schedule; SIGKILL its process group when a request arrives for
    which `when("METHOD path")` is true (that request answered 500, never forwarded; `when` is asked
    once per request, in arrival order). Returns (exit status, where in proxy.log the kill fell,
    -1 if it never did; stderr's end)."""
    box: dict = {}
    lock = threading.Lock()

    def decide(method, path, _):
        with lock:
            if "at" in box or not when(f"{method} {path}"):
                return None
            box["at"] = len(proxy.log)
        os.killpg(box["proc"].pid, signal.SIGKILL)
        while box["proc"].poll() is None:  # gone before the proxy answers: it never hears back
            time.sleep(0.002)
        return "500"

    with intercept(proxy, decide), tempfile.TemporaryFile("w+") as err:
        box["proc"] = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                       start_new_session=True)  # its own group: what it started dies with it
        rc = box["proc"].wait(timeout)
        err.seek(0)
        return rc, box.get("at", -1), err.read()[-2000:]
