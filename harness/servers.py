"""A loopback HTTP server that misbehaves on purpose (drops, 503, 429, ignored Range)."""

from __future__ import annotations

import hashlib
import http.server
import random
import re
import sys
import threading
from collections import Counter


class _Quiet(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client that went away (a killed download, a cut body) is expected here, not news."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _etag(data: bytes) -> str:
    return '"' + hashlib.sha256(data).hexdigest()[:16] + '"'


class FlakyServer:
    """Serves `files` on 127.0.0.1; faults are drawn from a seeded rng, counters are per path."""

    def __init__(self, files: dict[str, bytes], *, seed: int = 0, p_drop: float = 0.0,
                 p_503: float = 0.0, p_429: float = 0.0, retry_after: str = "1",
                 ignore_range: bool = False, fail_first: int = 0):
        self.files, self.rng, self.lock = files, random.Random(seed), threading.Lock()
        self.p_drop, self.p_503, self.p_429 = p_drop, p_503, p_429
        self.retry_after, self.ignore_range = retry_after, ignore_range
        self.fail_first = fail_first  # the first N requests answer 503, whatever the rng says
        self.requests: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()     # body bytes actually written to the socket
        self.ranges: list[str | None] = []
        self.cuts: list[int] = []               # body bytes sent before each connection this server cut
        self.httpd = _Quiet(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        srv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _status(self, code: int, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                data = srv.files.get(self.path)
                if data is None:
                    return self._status(404)
                self.send_response(200)
                self.send_header("ETag", _etag(data))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()

            def do_GET(self):
                rng_header = self.headers.get("Range")
                with srv.lock:
                    srv.requests[self.path] += 1
                    srv.ranges.append(rng_header)
                    fault = srv.rng.random()
                    forced = srv.requests.total() <= srv.fail_first
                data = srv.files.get(self.path)
                if data is None:
                    return self._status(404)
                if fault < srv.p_503 or forced:
                    return self._status(503)
                if fault < srv.p_503 + srv.p_429:
                    return self._status(429, {"Retry-After": srv.retry_after})
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", rng_header or "")
                if m and not srv.ignore_range:
                    start = int(m[1])
                    if start >= len(data):
                        return self._status(416, {"Content-Range": f"bytes */{len(data)}"})
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("ETag", _etag(data))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with srv.lock:
                    drop = srv.rng.random() < srv.p_drop
                    cut = srv.rng.randrange(len(body)) if drop else len(body)
                    if drop:
                        srv.cuts.append(cut)
                for i in range(0, cut, 1 << 16):
                    piece = body[i:min(i + (1 << 16), cut)]
                    self.wfile.write(piece)
                    with srv.lock:
                        srv.sent[self.path] += len(piece)
                if drop:
                    self.close_connection = True  # Content-Length promised more: a short read

        return Handler
