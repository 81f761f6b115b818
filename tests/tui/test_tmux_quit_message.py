"""What the command prints when the editor quits tells the truth (issue 32): ``saved
session NAME at PATH`` for a session that was there before, ``new session NAME at PATH``
only for one made in this run, and a new session quit empty is said to be not kept.
The installed command in tmux; the pane keeps what it printed after the editor left."""

from __future__ import annotations

from tests.tui.test_tmux import idle
from tests.tui.test_tmux_startup import saved_session


def _quit_and_read(term) -> str:
    term.keys("C-q")
    assert term.exit_status() == "0"
    return "".join(term.screen().splitlines())  # a long path wraps at the pane's edge


def test_quitting_an_existing_session_says_saved(tmux_run, tiny_llama_dir):
    from loomterm.sessions.session import session_path

    saved_session(tiny_llama_dir, "old", "Once upon a time")
    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "old"])
    term.keys(" there", literal=True)
    term.wait_for(lambda s: idle(s) and "there" in s, timeout=120, what="the typing synced")
    said = _quit_and_read(term)
    assert f"loomterm: saved session old at {session_path('old')}" in said
    assert "new session" not in said


def test_quitting_a_session_made_in_this_run_says_new(tmux_run, tiny_llama_dir):
    from loomterm.sessions.session import session_path

    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "fresh"])
    term.keys("Fresh words", literal=True)
    term.wait_for(lambda s: idle(s) and "Fresh words" in s, timeout=120, what="the typing synced")
    said = _quit_and_read(term)
    assert f"loomterm: new session fresh at {session_path('fresh')}" in said
    assert "saved session" not in said


def test_a_new_session_quit_empty_is_said_not_kept(tmux_run, tiny_llama_dir):
    from loomterm.sessions.session import session_path

    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "empty"])
    term.wait_for(lambda s: idle(s) and "loading" not in s, timeout=120, what="the model")
    said = _quit_and_read(term)
    assert "loomterm: session empty not kept: nothing was written in it" in said
    assert not session_path("empty").exists()
