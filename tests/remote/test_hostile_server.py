"""A hostile server, written here, in front of a real llama-server: it passes every
request through except ``/completion``, which it answers as an attacker would. Each
attack ends in one line, nothing hangs, memory stays bounded, the tokens that came are
kept, and what the server said reaches the terminal only through the sanitiser.

- pings, empty lines and repeated progress every 0.2 s, or a byte every 0.5 s, forever
  (the 60 s limit was per read, so this never timed out): the deadline between tokens
  ends it;
- a 50 MB line without a line break (httpx kept it all): stopped past 1 MiB;
- a plain JSON reply whose body trickles forever: stopped at the read timeout;
- HTTP 500 whose message holds escape sequences (OSC 52 writes the clipboard) and
  markup (``[/x]`` crashed the editor), on the command line and in the editor.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc

import httpx
import pytest

from loomterm.engine import Loom
from loomterm.engine.remote.http import ServerClient, Timeouts
from loomterm.errors import ServerError, ServerStreamCut, ServerTimeout
from loomterm.sanitize import safe_line
from loomterm.tree import Origin

PROMPT = "The history of weaving begins"
EVIL = "\x1b]52;c;aGFja2Vk\x07clipboard \x1b]0;pwned\x07 [/x] [bold]loud \x1b[2J\x9b31m"
TOKENS_FIRST = 2  # real tokens passed on before the pings start


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Passes requests on to ``server.target``, except ``/completion``."""

    def do_GET(self) -> None:
        self._pass_on(b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        streamed = json.loads(body or b"{}").get("stream", False)
        if self.path != "/completion" or streamed == (self.server.mode == "json_trickle"):
            self._pass_on(body)  # the attacks are on token streams; one on plain replies
            return
        try:
            getattr(self, f"_attack_{self.server.mode}")(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: what the attack was waiting for

    def _pass_on(self, body: bytes) -> None:
        reply = httpx.request(
            self.command,
            self.server.target + self.path,
            content=body or None,
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        self.send_response(reply.status_code)
        self.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(reply.content)))
        self.end_headers()
        self.wfile.write(reply.content)

    def _events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def _attack_pings(self, body: bytes, trickle: bool = False) -> None:
        """Two real tokens, then only keep-alives, forever (30 s at most)."""
        self._events()
        sent = 0
        with httpx.stream(
            "POST", self.server.target + "/completion", content=body, timeout=60
        ) as real:
            for line in real.iter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                self.wfile.write(f"{line}\n\n".encode())
                self.wfile.flush()
                if "prompt_progress" not in event and event.get("content") is not None:
                    sent += 1
                if sent >= TOKENS_FIRST:
                    break
        progress = {"prompt_progress": {"total": 7, "cache": 0, "processed": 7, "time_ms": 1}}
        end = time.monotonic() + 30
        while trickle and time.monotonic() < end:
            self.wfile.write(b":")  # a comment that never ends, a byte at a time
            self.wfile.flush()
            time.sleep(0.5)
        while time.monotonic() < end:
            for piece in (": ping\n\n", "\n", f"data: {json.dumps(progress)}\n\n", ":\n\n"):
                self.wfile.write(piece.encode())
                self.wfile.flush()
                time.sleep(0.05)

    def _attack_trickle(self, body: bytes) -> None:
        """Two real tokens, then one byte at a time, never a whole event."""
        self._attack_pings(body, trickle=True)

    def _attack_json_trickle(self, _body: bytes) -> None:
        """A plain reply whose body never ends: a byte every 0.2 s."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"content": "')
        end = time.monotonic() + 30
        while time.monotonic() < end:
            self.wfile.write(b"a")
            self.wfile.flush()
            time.sleep(0.2)

    def _attack_line(self, _body: bytes) -> None:
        """50 MB in one line, no line break."""
        self._events()
        self.wfile.write(b'data: {"content": "')
        block = b"a" * (64 << 10)
        for _ in range((50 << 20) // len(block)):
            self.wfile.write(block)

    def _attack_error(self, _body: bytes) -> None:
        """HTTP 500 with the message an attacker chose."""
        payload = json.dumps({"error": {"code": 500, "message": EVIL}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _attack_error_event(self, _body: bytes) -> None:
        """A stream whose one event is an error with the attacker's message."""
        self._events()
        self.wfile.write(f"data: {json.dumps({'error': {'message': EVIL}})}\n\n".encode())

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile(llama_server):
    fronts = []

    def make(mode: str) -> str:
        front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
        front.daemon_threads = True
        front.target, front.mode = llama_server.url, mode
        threading.Thread(target=front.serve_forever, daemon=True).start()
        fronts.append(front)
        return f"http://127.0.0.1:{front.server_address[1]}"

    yield make
    for front in fronts:
        front.shutdown()
        front.server_close()


@pytest.mark.parametrize("mode", ["pings", "trickle"])
def test_pings_and_progress_do_not_keep_a_silent_stream_alive(hostile, llama_server, mode):
    # A fresh server's first request is slow (it sets up its buffers): not this test's point.
    httpx.post(llama_server.url + "/completion", json={"prompt": "Hi", "n_predict": 1}, timeout=120)
    url = hostile(mode)
    loom = Loom.load(url, read_timeout=3.0)
    node = loom.append(loom.root, PROMPT)
    start = time.monotonic()
    with pytest.raises(ServerTimeout) as caught:
        loom.generate(node, 50, temperature=0)
    assert time.monotonic() - start < 15  # the attack would go on for 30 s
    assert str(caught.value) == (
        f"the server at {url} sent no token for 3 s after {TOKENS_FIRST} token(s), which "
        "are kept (pings and progress do not count)"
    )
    [kid] = [n for n in node.children if n.origin is Origin.MODEL]
    assert len(kid.tokens) == TOKENS_FIRST


def test_a_plain_reply_that_never_ends_times_out(hostile):
    url = hostile("json_trickle")
    client = ServerClient(url, Timeouts(read=2.0))
    start = time.monotonic()
    with pytest.raises(ServerTimeout) as caught:
        client.post("/completion", {"prompt": "Hi", "n_predict": 0, "stream": False})
    assert time.monotonic() - start < 15  # the attack would go on for 30 s
    assert (
        str(caught.value) == f"the server at {url} took over 2 s to send its answer to /completion"
    )


def test_a_line_without_end_is_cut_at_1_mib_in_bounded_memory(hostile):
    url = hostile("line")
    loom = Loom.load(url)
    node = loom.append(loom.root, PROMPT)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(ServerStreamCut) as caught:
            loom.generate(node, 10, temperature=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (
        f"the server at {url} sent a line over 1 MiB on /completion: not an event stream, "
        "stopped reading it"
    )
    assert peak < 16 << 20, f"{peak / 2**20:.1f} MiB held for a 50 MB line"


@pytest.mark.parametrize("mode", ["error", "error_event"])
def test_an_escape_laden_server_message_is_one_line_and_shown_safely(hostile, mode):
    url = hostile(mode)
    loom = Loom.load(url)
    node = loom.append(loom.root, PROMPT)
    with pytest.raises(ServerError) as caught:
        loom.generate(node, 10, temperature=0)
    shown = safe_line(caught.value)
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert "\u241b]52;c;aGFja2Vk\u2407clipboard" in shown  # visible, not obeyed
    assert shown.startswith(f"the server at {url} ")


def test_the_command_line_prints_the_server_message_safely(hostile, isolated_dirs):
    url = hostile("error")
    done = subprocess.run(
        [sys.executable, "-m", "loomterm.cli", "--model", url, "--prompt", "Hi"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if line.startswith("loomterm: ")]
    assert line.startswith(f"loomterm: the server at {url} answered /completion with 500: ")
    assert "\u241b]52;c;aGFja2Vk" in line
    assert not any(c in done.stderr for c in "\x1b\x07\x9b")
    assert not any(c in done.stdout for c in "\x1b\x07\x9b")


async def test_the_editor_shows_a_500_with_markup_and_escapes_as_plain_text(hostile, tmp_path):
    """ctrl+g on a server that answers 500: a visible error, sanitised, no MarkupError,
    and the editor goes on."""
    from loomterm.tui.app import LoomApp
    from tests.tui.conftest import settle, write_and_generate

    loom = Loom.load(hostile("error"))
    loom.update_settings(temperature=0.0, max_new_tokens=8, n=1)
    app = LoomApp(loom, show_speed=False, sync_delay=0.05, export_dir=tmp_path)
    async with app.run_test(size=(160, 30)) as pilot:
        await write_and_generate(pilot, "Once upon a time", timeout=60)
        errors = [n for n in app._notifications if n.severity == "error"]  # noqa: SLF001
        assert errors, "ctrl+g did nothing visible"
        [error] = errors
        message = error.message
        assert "answered /completion with 500" in message
        assert not any(c in message for c in "\x1b\x07\x9b")
        assert "[/x] [bold]loud" in message and error.markup is False  # shown as it is
        await pilot.pause(0.2)
        await pilot.press("end", "space", "x")  # still an editor
        await settle(pilot)
        assert app.doc.text.endswith(" x")
