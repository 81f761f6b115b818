"""The editor opens at once: the installed command in tmux, typed into while its model
is still loading (the status bar says so), and the session file checked afterwards."""

from __future__ import annotations

import subprocess
import sys

from tests.tui.test_tmux import document_lines, idle


def exported_text(name: str) -> str:
    """The session's current branch as text, as ``loomterm export`` writes it."""
    result = subprocess.run(
        [sys.executable, "-m", "loomterm", "export", name, "--format", "txt"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def test_typing_while_the_model_loads_lands_and_the_status_bar_says_loading(
    tmux_run, tiny_llama_dir
):
    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "early"])
    term.keys("Once upon ", literal=True)  # at once: before the editor is on the screen
    # The editor is on the screen while the model is still loading (torch is imported
    # in the background, which takes seconds): the status bar says so.
    loading = term.wait_for(
        lambda s: "^p" in s and "model loading" in s, timeout=60, what="the editor, loading"
    )
    assert "tiny-llama" in loading
    term.keys("a time.", literal=True)  # a full stop: nothing for token healing to redo
    term.keys("C-g")  # needs the model: held until it is ready, then run
    done = term.wait_for(
        lambda s: idle(s) and "2 nodes" in s and "loading" not in s,
        timeout=120,
        what="the typing synced and the held generation run",
    )
    # The words as typed, in order (a model word glued to "time." may wrap it onto the
    # next line: the lines are joined)
    assert " ".join(document_lines(done)).startswith("Once upon a time.")
    term.keys("C-q")
    assert term.exit_status() == "0"
    text = exported_text("early")
    assert text.startswith("Once upon a time")  # typed before the editor and its model
    assert len(text.strip()) > len("Once upon a time")  # the held generation ran after


def saved_session(model_dir, name: str, text: str) -> None:
    """A session ``name`` on ``model_dir`` holding ``text``, as the editor leaves one."""
    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, save_loom, session_path

    loom = Loom.load(str(model_dir), device="cpu")
    loom.cursor = loom.append(loom.root, text)
    path = session_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    close_session(loom)


def test_the_most_recent_session_under_its_model_opens_while_the_model_loads(
    tmux_run, tiny_llama_dir
):
    """``loomterm --model M`` with no -s: the most recent session, made on M (its
    folder's fingerprint, read without torch), paints at once and takes typing."""
    saved_session(tiny_llama_dir, "recent", "Once upon a time")
    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu"])
    term.keys(" there", literal=True)  # at once: kept in order until the model is there
    loading = term.wait_for(
        lambda s: "^p" in s and "model loading" in s and "Once upon a time" in s,
        timeout=60,
        what="the recent session on the screen, its model loading",
    )
    assert "tiny-llama" in loading
    done = term.wait_for(
        lambda s: idle(s) and "there" in s, timeout=120, what="the model, and the typing synced"
    )
    assert document_lines(done)[0].startswith("Once upon a time there")
    term.keys("C-q")
    assert term.exit_status() == "0"
    assert exported_text("recent").startswith("Once upon a time there")


def test_a_recent_session_on_another_model_gives_a_new_session_at_once(
    tmux_run, tiny_llama_dir, tiny_gpt2_dir
):
    """The most recent session was made on another model: a new session on the model
    asked for is on the screen at once, loading; the old session is left as it was."""
    from loomterm.sessions.session import list_sessions

    saved_session(tiny_gpt2_dir, "old", "Some old text")
    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu"])
    loading = term.wait_for(
        lambda s: "^p" in s and "model loading" in s, timeout=60, what="a new session, loading"
    )
    assert "Some old text" not in loading and "tiny-llama" in loading
    term.keys("Fresh words", literal=True)
    term.wait_for(lambda s: idle(s) and "Fresh words" in s, timeout=120, what="the typing synced")
    term.keys("C-q")
    assert term.exit_status() == "0"
    names = sorted(s.name for s in list_sessions())
    assert len(names) == 2 and "old" in names
    new = next(name for name in names if name != "old")
    assert exported_text(new).startswith("Fresh words")
    assert exported_text("old").startswith("Some old text")
