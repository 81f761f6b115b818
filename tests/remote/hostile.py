"""A hostile server for the credential tests: it records every request it gets (path,
headers, body) and answers as told: 404 for everything, a redirect to another address,
or every request passed on to a real server behind it (so a real llama-server answers
while this one reads what loomterm sent). It is the attacker, not a mock: loomterm
talks to it over real sockets on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def raw(self) -> str:
        """Everything received, as text: for grepping for a canary."""
        lines = [f"{self.method} {self.path}"] + [f"{k}: {v}" for k, v in self.headers.items()]
        return "\n".join(lines) + "\n" + self.body.decode("utf-8", "replace")


@dataclass
class Hostile:
    """A recording server. ``redirect_to``: answer every request with a 307 there;
    ``upstream``: pass every request on to that server and its answer back; else
    answer ``status`` (404: nothing here; 401: a key is wanted), with the headers it
    received (``X-*``, ``Authorization``) as the error's text when ``echo``."""

    redirect_to: str | None = None
    upstream: str | None = None
    status: int = 404  # the answer to everything, without redirect_to or upstream
    echo: bool = False  # answer ``status`` with every header received as its error text
    seen: list[Seen] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Hostile:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.seen.append(Seen(self.command, self.path, dict(self.headers), body))
                if owner.redirect_to is not None:
                    self._answer(307, b"", {"Location": owner.redirect_to + self.path})
                elif owner.upstream is not None:
                    self._forward(body)
                elif owner.echo:  # an attacker that shows back what it got
                    echoed = "; ".join(
                        f"{k}: {v}"
                        for k, v in self.headers.items()
                        if k.lower().startswith("x-") or k.lower() == "authorization"
                    )
                    self._answer(owner.status, json.dumps({"error": echoed}).encode(), {})
                else:
                    said = b'{"error": "Invalid API Key"}' if owner.status == 401 else b"{}"
                    self._answer(owner.status, said, {})

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, body: bytes) -> None:
                keep = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "accept", "authorization")
                }
                with httpx.Client(base_url=owner.upstream, timeout=120) as client:
                    reply = client.request(self.command, self.path, content=body, headers=keep)
                headers = {"Content-Type": reply.headers.get("Content-Type", "application/json")}
                self.send_response(reply.status_code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def authorizations(self) -> list[str | None]:
        """The Authorization header of each request, in order (None: none sent)."""
        return [
            next((v for k, v in s.headers.items() if k.lower() == "authorization"), None)
            for s in self.seen
        ]

    def everything(self) -> str:
        return "".join(s.raw() for s in self.seen)
