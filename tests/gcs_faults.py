"""A fault-injecting HTTP proxy of ours in front of the Cloud Storage emulator, on 127.0.0.1.

google-cloud-storage is pointed at the proxy (STORAGE_EMULATOR_HOST); the proxy forwards every request to the
emulator, except that the next requests matching a rule get a fault instead: a 503 (or any status), a reset
connection (closed without a response), or a slow response. Each rule fires a bounded number of times, so
every test ends; the proxy counts what it saw, so a test can tell a retried request from one that was not.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import socket
import threading
import time
from typing import Callable, List, Optional, Tuple

# The request kinds of google-cloud-storage's JSON and upload APIs, from method and path.
UPLOAD, DOWNLOAD, LIST, METADATA, DELETE = "upload", "download", "list", "metadata", "delete"


def request_kind(method: str, path: str) -> str:
    if path.startswith("/upload/"):
        return UPLOAD
    if method == "DELETE":
        return DELETE
    if "alt=media" in path or path.startswith("/download/"):
        return DOWNLOAD
    if path.split("?")[0].endswith("/o"):
        return LIST
    return METADATA


@dataclasses.dataclass
class Fault:
    """Fire on the next `times` requests of `kind` (None: any): respond with `status`, reset the
    connection (status 0), or, with `delay`, answer normally after sleeping that many seconds."""

    kind: Optional[str]
    times: int
    status: int = 503
    delay: float = 0.0
    fired: int = 0

    def matches(self, kind: str) -> bool:
        return self.fired < self.times and self.kind in (None, kind)


class FaultProxy:
    """The proxy. `faults` may be changed between requests; `seen` lists (kind, method, path, outcome)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.faults: List[Fault] = []
        self.seen: List[Tuple[str, str, str, str]] = []
        self._lock = threading.Lock()
        handler = _handler_for(self)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults = list(faults)
            self.seen = []

    def take_fault(self, kind: str) -> Optional[Fault]:
        with self._lock:
            for fault in self.faults:
                if fault.matches(kind):
                    fault.fired += 1
                    return fault
        return None

    def record(self, kind: str, method: str, path: str, outcome: str) -> None:
        with self._lock:
            self.seen.append((kind, method, path, outcome))

    def count(self, predicate: Callable[[Tuple[str, str, str, str]], bool]) -> int:
        with self._lock:
            return sum(1 for entry in self.seen if predicate(entry))


def _handler_for(proxy: FaultProxy):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            kind = request_kind(self.command, self.path)
            fault = proxy.take_fault(kind)
            if fault is not None and fault.delay:
                time.sleep(fault.delay)
                fault = None
            if fault is not None and fault.status == 0:
                proxy.record(kind, self.command, self.path, "reset")
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.connection.close()
                self.close_connection = True
                return
            if fault is not None:
                proxy.record(kind, self.command, self.path, str(fault.status))
                payload = b'{"error": {"code": %d, "message": "injected by the fault proxy"}}' % fault.status
                self.send_response(fault.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            proxy.record(kind, self.command, self.path, str(response.status))
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            upstream.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay

    return Handler
