"""A loopback HTTP proxy in front of the real S3 server that answers `503 SlowDown`, as S3
does when throttling, to the first N requests (or to all), and forwards the rest unchanged;
optionally slowly, as a store on a thin link: each request held for its body's size over a rate.

The S3 answers come from SeaweedFS itself; only the throttling is ours. Requests keep their
Host header and bytes, so their signatures still verify upstream.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class ThrottlingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, throttle: int | None, seconds_per_mib: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.throttle_left = throttle  # None: throttle every request
        self.seconds_per_mib = seconds_per_mib  # how long each MiB of a request's body takes
        self.seen = self.throttled = 0
        self.lock = threading.Lock()

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client closing its kept-alive connection is no error of the test's

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def take_throttle(self) -> bool:
        with self.lock:
            self.seen += 1
            if self.throttle_left is not None and self.throttle_left <= 0:
                return False
            if self.throttle_left is not None:
                self.throttle_left -= 1
            self.throttled += 1
            return True


class Handler(BaseHTTPRequestHandler):
    server: ThrottlingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.server.take_throttle():
            self._answer(503, {"Content-Type": "application/xml"}, SLOW_DOWN)
            return
        time.sleep(len(body) / 2**20 * self.server.seconds_per_mib)
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            upstream.request(self.command, self.path, body or None, dict(self.headers.items()))
            got = upstream.getresponse()
            data = got.read()
            headers = {k: v for k, v in got.getheaders() if k.lower() != "transfer-encoding"}
            self._answer(got.status, headers, data)
        finally:
            upstream.close()

    def _answer(self, status: int, headers: dict[str, str], data: bytes) -> None:
        self.send_response(status)
        head = self.command == "HEAD" and status != 503  # its length is the object's, unsent
        for key, value in headers.items():
            if head or key.lower() != "content-length":
                self.send_header(key, value)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any


@contextmanager
def throttling(
    upstream: str, throttle: int | None, seconds_per_mib: float = 0.0
) -> Iterator[ThrottlingServer]:
    """A throttling proxy to `upstream` (an http://host:port), for the block's duration."""
    server = ThrottlingServer(upstream, throttle, seconds_per_mib)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
