"""The installed ``loomterm`` in a real terminal (tmux) on ``--backend llama.cpp``: a
session made on llama.cpp reopens on it without the flag, streams a generation, makes
siblings in one batch and switches between them; the session file records the backend.
Read back with ``capture-pane`` and ``loomterm export``."""

from __future__ import annotations

import subprocess

import pytest

from loomterm.sessions.session import load_session, session_path
from tests.llamacpp.conftest import THREADS
from tests.remote.test_tmux_server import quiet, settled
from tests.tui.test_tmux import document_lines

pytestmark = pytest.mark.default_model


def test_the_editor_on_llama_cpp_in_tmux(term, binding, default_gguf):
    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, save_loom

    loom = Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=1024, threads=THREADS)
    loom.update_settings(max_new_tokens=48, n=3, temperature=0.8)
    save_loom(loom, session_path("story"))
    close_session(loom)

    term.start([term.command, "-s", "story", "--threads", str(THREADS)])
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, timeout=90, what="the editor to start")
    # The model loads behind the open editor; then the status bar says where it runs.
    term.wait_for(lambda s: "llama.cpp" in s, timeout=90, what="the model on llama.cpp")

    # Ending in a full stop: nothing to heal, so the first generation is one node.
    term.keys("Once upon a time.", literal=True)
    term.wait_for(lambda s: "Once upon a time." in s and settled(s), what="the typing to sync")
    term.keys("C-g")
    first = quiet(term, lambda s: settled(s) and "2 nodes" in s, "the first generation")
    text = " ".join(document_lines(first))
    assert text.startswith("Once upon a time") and len(text) > 40

    term.keys("C-n")  # three siblings, one batch
    after_n = quiet(term, lambda s: settled(s) and "[3]" in s, "the siblings")
    assert "sibling 1 of 3" in after_n, after_n  # the caret stays in the first sibling
    term.keys("M-Right")
    term.wait_for(lambda s: settled(s) and "sibling 2 of 3" in s, what="M-Right")
    term.keys("M-Right")
    term.wait_for(lambda s: settled(s) and "sibling 3 of 3" in s, what="M-Right again")
    print("\n--- capture-pane ---\n" + term.screen())
    term.keys("C-q")
    assert term.exit_status() == "0"

    data = load_session(session_path("story"))
    assert data.model["backend"] == "llama.cpp"
    kids = [n for n in data.tree.nodes.values() if n.origin.name == "MODEL"]
    assert len(kids) == 4 and all(n.tokens for n in kids)
    exported = subprocess.run(
        [term.command, "export", "story", "--format", "txt"], capture_output=True, text=True
    )
    assert exported.returncode == 0 and exported.stdout.startswith("Once upon a time")
