"""A hostile server on 127.0.0.1 for the fuzz tests: the attacker, not a mock.

It answers each request from a script: ``script(method, path, body)`` returns what to
send (status, content type, body bytes, and whether to cut the connection before the
body ends), or None to pass the request through to a real server behind it.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx


@dataclass
class Reply:
    status: int = 200
    content_type: str = "application/json"
    body: bytes = b"{}"
    cut: bool = False  # announce a longer body, send part, then close


Script = Callable[[str, str, bytes], "Reply | None"]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        front = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = front.script(self.command, self.path, body)
        if reply is None and front.target:
            passed = httpx.request(
                self.command,
                front.target + self.path,
                content=body or None,
                headers={"Content-Type": "application/json"},
                timeout=60,
            )
            reply = Reply(
                passed.status_code,
                passed.headers.get("Content-Type", "application/json"),
                passed.content,
            )
        reply = reply or Reply(404, body=b'{"error": "no"}')
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body) + (100 if reply.cut else 0)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(reply.body)
            self.wfile.flush()
        except OSError:
            pass
        if reply.cut:
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@contextmanager
def hostile_server(script: Script, target: str | None = None) -> Iterator[str]:
    """Serve ``script`` on a free port of 127.0.0.1; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.script, server.target = script, target
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
