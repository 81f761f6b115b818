"""The red team's rounds, in a real terminal: the installed ``loomterm`` in tmux on a
model that is still loading (a server on 127.0.0.1 that accepts and never answers),
a marker typed, ctrl+g, then kill -9 (or ctrl+q). The session file holds the marker
(issue 30; issue 32's quit item)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from loomterm import store
from loomterm.sessions.session import session_path
from tests.tui.test_tmux import document_lines, idle


@pytest.fixture
def silent_url():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def loomterm_pid(term) -> int:
    shell = int(term.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip())
    return int(Path(f"/proc/{shell}/task/{shell}/children").read_text().split()[0])


def typed_text(name: str) -> str | None:
    typed = store.load(session_path(name)).typed
    return typed.text if typed is not None else None


@pytest.mark.parametrize("round_", range(3))
def test_kill_dash_nine_while_the_model_loads_keeps_the_marker(tmux_run, silent_url, round_):
    term = tmux_run(["--model", silent_url, "-s", f"marked{round_}"])
    marker = f"MARKER-{round_}-{os.getpid()}"
    term.keys(marker, literal=True)  # at once, perhaps before the editor paints
    term.wait_for(
        lambda s: "model loading" in s and marker in s, timeout=60, what="the marker, loading"
    )
    term.keys("C-g")  # held for the model, which never comes
    time.sleep(0.3)
    os.kill(loomterm_pid(term), signal.SIGKILL)
    term.exit_status()
    assert typed_text(f"marked{round_}") == marker


def test_ctrl_q_while_the_model_loads_leaves_at_once_and_the_typing_reopens(
    tmux_run, silent_url, tiny_llama_dir
):
    term = tmux_run(["--model", silent_url, "-s", "quitter"])
    term.wait_for(lambda s: "model loading" in s, timeout=60, what="the editor, loading")
    term.keys("Kept across a quit", literal=True)
    term.wait_for(lambda s: "Kept across a quit" in s, what="the typing")
    start = time.monotonic()
    term.keys("C-q")
    assert term.exit_status(timeout=30) == "0"
    took = time.monotonic() - start
    assert took < 5, f"ctrl+q during a load took {took:.1f} s"  # the Pilot test: < 1 s
    assert typed_text("quitter") == "Kept across a quit"

    # Reopened on a model that loads: the text is on the screen and the model reads it.
    again = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "quitter"])
    screen = again.wait_for(
        lambda s: idle(s) and "Kept across a quit" in s and "loading" not in s,
        timeout=120,
        what="the kept typing, read by the model",
    )
    assert document_lines(screen)[0].startswith("Kept across a quit")
    again.keys("C-q")
    assert again.exit_status() == "0"
    data = store.load(session_path("quitter"))
    assert data.path_text(data.cursor_node) == "Kept across a quit"
    assert data.typed is None
