"""Faults of a real llama-server, each one clear line, nothing lost: a port with nothing
listening, a socket that never answers, a server paused or killed mid-stream, a wrong
API key, an unknown model, a server restarted on another model, 429 and 5xx replies."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from loomterm.engine import Loom
from loomterm.engine.remote import connect
from loomterm.errors import (
    ServerAuthError,
    ServerError,
    ServerModelError,
    ServerRateLimited,
    ServerStreamCut,
    ServerTimeout,
    ServerUnreachable,
    SessionError,
)
from loomterm.serving.llama_server import free_port
from loomterm.sessions.session import Session, close_session

PROMPT = "The history of weaving begins"


def kill_after(server, count: int):
    """An ``on_token`` that kills (SIGKILL) the server once ``count`` tokens came."""

    def on_token(kid, _token, _piece):
        if len(kid.tokens) == count:
            server.kill()

    return on_token


def test_nothing_listening():
    port = free_port()
    with pytest.raises(ServerUnreachable) as caught:
        Loom.load(f"http://127.0.0.1:{port}")
    assert str(caught.value) == (
        f"cannot reach the server at http://127.0.0.1:{port} (connection refused): is it running?"
    )


def test_a_socket_that_accepts_and_never_answers_times_out():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(ServerTimeout) as caught:
            connect(url, read_timeout=1.0)
        assert time.monotonic() - start < 10
    assert str(caught.value) == f"the server at {url} stopped answering for 1 s (read timeout)"


def test_a_server_paused_mid_stream_times_out_keeping_the_tokens(own_server):
    server = own_server()
    # A fresh server's first request is slow (it sets up its buffers): not this test's point.
    httpx.post(server.url + "/completion", json={"prompt": "Hi", "n_predict": 1}, timeout=120)
    loom = Loom.load(server.url, read_timeout=5.0)
    node = loom.append(loom.root, PROMPT)

    def pause(kid, _token, _piece):
        if len(kid.tokens) == 3:
            os.kill(server.process.pid, signal.SIGSTOP)

    try:
        with pytest.raises(ServerTimeout) as caught:
            loom.generate(node, 200, temperature=0, on_token=pause)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    [kid] = node.children
    assert len(kid.tokens) >= 3
    assert str(caught.value) == (
        f"the server at {server.url} stopped answering for 5 s (read timeout) "
        f"after {len(kid.tokens)} token(s), which are kept"
    )


def test_killed_mid_stream_keeps_the_tokens_on_disk_and_reads_back_offline(own_server, tmp_path):
    server = own_server()
    loom = Loom.load(server.url)
    path = tmp_path / "story.loom"
    Session.create(loom, path)
    node = loom.append(loom.root, PROMPT)
    with pytest.raises(ServerStreamCut) as caught:
        loom.generate(node, 200, temperature=0, on_token=kill_after(server, 3))
    [kid] = node.children
    assert len(kid.tokens) >= 3
    assert str(caught.value) == (
        f"the server at {server.url} cut the stream after {len(kid.tokens)} token(s), "
        "which are kept: it stopped or restarted"
    )
    text = loom.text(kid)
    close_session(loom)

    # The server is down: writable, the session refuses in one line; read-only, all is there.
    with pytest.raises(SessionError) as refused:
        Session.open(path)
    assert str(refused.value) == (
        f"cannot reach the server at {server.url} (connection refused): is it running?; "
        "session 'story' can still be read with --read-only"
    )
    reader = Session.open(path, read_only=True)
    offline = reader.loom
    assert offline.text(offline.tree.nodes[kid.id]) == text
    with pytest.raises(ServerUnreachable):
        offline.generate(offline.tree.nodes[kid.id], 4)
    close_session(offline)


def test_api_key_missing_wrong_and_right(own_server, monkeypatch, tmp_path):
    server = own_server(extra=("--api-key", "sesame-123"))
    monkeypatch.delenv("LOOMTERM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ServerAuthError) as missing:
        connect(server.url)
    assert str(missing.value) == (
        f"the server at {server.url} refused the API key (401: Invalid API Key); "
        "set LOOMTERM_API_KEY (or OPENAI_API_KEY) to its key"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    with pytest.raises(ServerAuthError, match=r"\(401: Invalid API Key\); check OPENAI_API_KEY"):
        connect(server.url)
    monkeypatch.setenv("LOOMTERM_API_KEY", "sesame-123")
    loom = Loom.load(server.url)
    [kid] = loom.generate(loom.append(loom.root, PROMPT), 3, temperature=0)
    assert len(kid.tokens) == 3
    path = tmp_path / "keyed.loom"
    Session.create(loom, path)
    close_session(loom)
    assert b"sesame-123" not in path.read_bytes()  # the key lives in the environment only


def test_a_model_name_the_server_does_not_have(llama_server):
    with pytest.raises(ServerModelError) as caught:
        connect(llama_server.url, server_model="gpt-17")
    message = str(caught.value)
    assert message.startswith(
        f"the server at {llama_server.url} (llama-server) has no model 'gpt-17' (it serves: "
    )
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in message


def test_a_server_restarted_on_another_model_is_refused(own_server, tiny_gguf):
    first = own_server()
    loom = Loom.load(first.url)
    node = loom.append(loom.root, PROMPT)
    loom.generate(node, 2, temperature=0)
    first.kill()
    own_server(model=tiny_gguf, port=first.port, n_ctx=256, slots=1)
    with pytest.raises(ServerModelError) as caught:
        loom.generate(node, 2, temperature=0)
    assert str(caught.value) == (
        f"the server at {first.url} now serves tiny, not SmolLM2-135M-Instruct.Q4_1 this tree "
        "was made with (config, weights, tokenizer differ): restart it on that model to go on "
        "(the tree is unchanged)"
    )
    assert len(node.children) == 1  # nothing was added from the other model


@pytest.fixture
def tiny_gguf(tiny_llama_dir, tmp_path) -> Path:
    from tests.tiny_gguf import write_llama_gguf

    return write_llama_gguf(tiny_llama_dir, tmp_path / "tiny.gguf")


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A front that answers the first ``refusals`` requests with ``status`` (and a
    Retry-After), then passes requests through to the real server behind it."""

    def _answer(self) -> None:
        front = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if front.refusals > 0:
            front.refusals -= 1
            self.send_response(front.status)
            if front.retry_after is not None:
                self.send_header("Retry-After", str(front.retry_after))
            payload = b'{"error": {"message": "slow down", "code": %d}}' % front.status
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        reply = httpx.request(
            self.command,
            front.target + self.path,
            content=body or None,
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        self.send_response(reply.status_code)
        self.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(reply.content)))
        self.end_headers()
        self.wfile.write(reply.content)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing_front(llama_server):
    fronts = []

    def make(status: int, refusals: int, retry_after: int | None = None) -> str:
        front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
        front.target, front.status = llama_server.url, status
        front.refusals, front.retry_after = refusals, retry_after
        threading.Thread(target=front.serve_forever, daemon=True).start()
        fronts.append(front)
        return f"http://127.0.0.1:{front.server_address[1]}"

    yield make
    for front in fronts:
        front.shutdown()


def test_429_with_a_short_retry_after_is_waited_out_and_a_long_one_reported(refusing_front):
    url = refusing_front(429, refusals=1, retry_after=1)
    start = time.monotonic()
    loom = Loom.load(url)  # waited one second, then connected
    assert time.monotonic() - start >= 1.0
    assert loom.runner.info.kind == "llama-server"
    url = refusing_front(429, refusals=1, retry_after=120)
    with pytest.raises(ServerRateLimited) as caught:
        connect(url)
    assert caught.value.retry_after == 120
    assert str(caught.value) == (
        f"the server at {url} is rate limiting requests (429); it asks to wait 120 s; "
        "try again later"
    )


def test_a_5xx_reply_is_one_line_with_the_servers_message(refusing_front):
    url = refusing_front(503, refusals=1)
    with pytest.raises(ServerError) as caught:
        connect(url)
    assert str(caught.value) == f"the server at {url} answered /props with 503: slow down"
