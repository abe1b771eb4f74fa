"""A webhook on 127.0.0.1 for the alert tests: it records every POST and answers with a chosen status."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any


class Webhook:
    """What the server received: each POST's path, content type and JSON body."""

    def __init__(self, status: int):
        self.status = status
        self.posts: list[dict[str, Any]] = []
        self.url = ""


@contextlib.contextmanager
def webhook(status: int = 200) -> Iterator[Webhook]:
    """A server on a free port of 127.0.0.1 for the block; `.url` is its URL (path /hooks/T0/s3cr3t)."""
    received = Webhook(status)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.posts.append(
                {"path": self.path, "content_type": self.headers["Content-Type"], "body": json.loads(body)}
            )
            self.send_response(received.status)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # keep the test's output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T0/s3cr3t"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/T0/s3cr3t"


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A URL on 127.0.0.1 whose server takes connections and never answers, for the block."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/T0/s3cr3t"
