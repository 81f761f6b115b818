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
    term.keys("a time", literal=True)
    term.keys("C-g")  # needs the model: held until it is ready, then run
    done = term.wait_for(
        lambda s: idle(s) and "2 nodes" in s and "loading" not in s,
        timeout=120,
        what="the typing synced and the held generation run",
    )
    assert document_lines(done)[0].startswith("Once upon a time")
    term.keys("C-q")
    assert term.exit_status() == "0"
    text = exported_text("early")
    assert text.startswith("Once upon a time")  # typed before the editor and its model
    assert len(text.strip()) > len("Once upon a time")  # the held generation ran after
