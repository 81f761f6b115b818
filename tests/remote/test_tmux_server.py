"""The installed ``loomterm`` in a real terminal (tmux) against a real llama-server: it
starts on ``--model URL``, streams a generation, makes siblings and switches between
them; then the local default model joins the tree from the palette and ctrl+n asks both
for siblings (the legend names both). Read back with ``capture-pane``.

The tmux socket is ``$LOOMTERM_TEST_TMUX_SOCKET`` (default ``loomterm-served-<pid>``).
Skipped without tmux or the installed command (failed under ``LOOMTERM_REQUIRE_ALL_TESTS``).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from loomterm.sessions.session import load_session, session_path
from tests.helpers import require_or_skip
from tests.tui.test_tmux import Tmux, bars, document_lines, idle, loomterm_command

pytestmark = pytest.mark.default_model


@pytest.fixture
def term(tmp_path, isolated_dirs, monkeypatch):
    from tests.tui import test_tmux

    monkeypatch.setattr(test_tmux, "WIDTH", 150)  # room for the status bar's state
    require_or_skip(shutil.which("tmux"), "tmux is not installed")
    command = loomterm_command()
    require_or_skip(command, "the loomterm command is not installed (pip install -e .)")
    env = {
        name: os.environ[name]
        for name in ("LOOMTERM_DATA_DIR", "LOOMTERM_CONFIG_DIR", "LOOMTERM_CACHE_DIR")
    }
    socket = os.environ.get("LOOMTERM_TEST_TMUX_SOCKET") or f"loomterm-served-{os.getpid()}"
    tmux = Tmux(socket, tmp_path, env)
    tmux.command = command
    yield tmux
    tmux.kill()


def settled(screen: str) -> bool:
    """Nothing running: no state on the status bar, and no "esc Stop" in the footer."""
    return idle(screen) and "esc Stop" not in bars(screen)


def quiet(term, predicate, what: str, timeout: float = 120.0, still: float = 3.0) -> str:
    """The screen once ``predicate`` holds and nothing changed for ``still`` seconds (a
    notice can cover the status bar's "generating", and a busy server pauses)."""
    end = time.monotonic() + timeout
    screen, since = "", time.monotonic()
    while time.monotonic() < end:
        now = term.screen()
        if now != screen:
            screen, since = now, time.monotonic()
        elif predicate(screen) and time.monotonic() - since >= still:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; the screen was:\n{screen}")


def test_the_editor_on_a_server_in_tmux(term, llama_server, default_gguf):
    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, save_loom

    # A session on the server (the settings travel with it). Generations long enough
    # to be seen streaming: llama-server writes 24 tokens faster than two captures of
    # the screen on an idle machine.
    loom = Loom.load(llama_server.url)
    loom.update_settings(max_new_tokens=96, n=3, temperature=0.8)
    save_loom(loom, session_path("served"))
    close_session(loom)

    term.start([term.command, "-s", "served"])
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, timeout=90, what="the editor to start")

    term.keys("Once upon a time", literal=True)
    term.wait_for(lambda s: "Once upon a time" in s and idle(s), what="the typing to sync")
    term.keys("C-g")
    # The text streams in: the document is seen at lengths between the prompt and the end.
    lengths: set[int] = set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        screen = term.screen()
        lengths.add(len(" ".join(document_lines(screen))))
        if idle(screen) and "2 nodes" in screen:
            break
        time.sleep(0.01)
    first = quiet(term, lambda s: settled(s) and "2 nodes" in s, "the first generation")
    first_text = document_lines(first)
    final = len(" ".join(first_text))
    assert first_text[0].startswith("Once upon a time") and final > 30
    between = [n for n in lengths if len("Once upon a time") < n < final]
    assert between, f"no partial text seen: lengths {sorted(lengths)}"

    # ctrl+n: N siblings from the server (one request); switch among them.
    term.keys("C-n")
    after_n = quiet(term, lambda s: settled(s) and "[3]" in s, "the siblings")
    assert "sibling 3 of 3" in after_n, after_n  # the caret is in the last sibling
    term.keys("M-Left")
    term.wait_for(lambda s: settled(s) and "sibling 2 of 3" in s, what="M-Left")
    term.keys("M-Right")
    term.wait_for(lambda s: settled(s) and "sibling 3 of 3" in s, what="M-Right")

    # The local default model joins the tree from the palette (same tokenizer).
    local = Path(os.environ["LOOMTERM_CACHE_DIR"]) / "models" / "SmolLM2-135M-Instruct"
    term.keys("C-p")
    term.wait_for(lambda s: "Search for commands" in s or ">" in s, what="the palette")
    term.keys("Attach model", literal=True)
    term.wait_for(lambda s: "Attach model" in s, what="the palette's match")
    term.keys("Enter")
    term.wait_for(lambda s: "Attach a model" in s, what="the attach dialog")
    term.keys(str(local), literal=True)
    term.keys("Enter")
    joined = quiet(term, lambda s: "models " in s and settled(s), "the legend")
    assert "(active)" in joined

    # ctrl+n now asks which models: its defaults are N (3) from the active model (the
    # server) and 1 from the other (the local model); enter generates.
    term.keys("C-End")
    term.keys("C-n")
    term.wait_for(lambda s: "Siblings from several models" in s, what="the siblings dialog")
    term.keys("Enter")
    both = quiet(
        term,
        lambda s: settled(s) and " of 4 · depth 2" in s and "Siblings" not in s,
        "the 4 siblings",
    )
    print("\n--- capture-pane ---\n" + both)
    term.keys("C-q")
    assert term.exit_status() == "0"

    data = load_session(session_path("served"))
    writers = {n.meta.get("model") for n in data.tree.nodes.values() if n.origin.name == "MODEL"}
    assert len(writers) == 2 and set(data.models) == writers
    kinds = sorted(record["kind"] for record in data.models.values())
    assert kinds == ["llama-server", "local"]
