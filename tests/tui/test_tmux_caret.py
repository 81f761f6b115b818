"""The caret through a real terminal: the installed command, killed with SIGKILL after
the caret has rested, reopens with the caret where it was (``tests/tui/test_tmux.py``
has the harness)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from loomterm.sessions.session import load_session, session_path
from tests.tui.test_tmux import idle

TEXT = "Once upon a time"


def editor_pid(term) -> int:
    """The loomterm process in the pane (the pane runs ``sh -c 'env ... loomterm'``)."""
    shell = term.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip()
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", shell], capture_output=True, text=True, timeout=10
    ).stdout.split()
    assert len(out) == 1, out
    return int(out[0])


def test_a_rested_caret_survives_kill_9(tmux_run, tiny_llama_dir):
    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "caret"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    term.keys(TEXT, literal=True)
    term.wait_for(lambda s: TEXT in s and idle(s), what="the typing to sync")
    term.keys("C-Home", *["Right"] * 9)  # "Once upon|"

    # Resting is enough: the caret reaches the file while the editor runs.
    deadline = time.monotonic() + 20
    caret = None
    while time.monotonic() < deadline:
        caret = load_session("caret").caret
        if caret is not None and caret.char == 9:
            break
        time.sleep(0.2)
    assert caret is not None and caret.char == 9, term.screen()
    os.kill(editor_pid(term), signal.SIGKILL)
    assert term.exit_status() == str(128 + signal.SIGKILL)
    assert session_path("caret").exists()

    again = tmux_run(args)
    again.wait_for(lambda s: TEXT in s and idle(s), what="reopening")
    again.keys("X", literal=True)  # typed at the caret, not at the end
    again.wait_for(lambda s: "Once uponX a time" in s and idle(s), what="the typing")
    again.keys("C-q")
    assert again.exit_status() == "0"
    assert load_session("caret").path_text() == "Once uponX a time"
