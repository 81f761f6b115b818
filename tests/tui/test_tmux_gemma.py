"""Gemma 3 270M (its tokenizer adds ``<bos>``) in the installed ``loomterm`` in tmux, on
the torch backend: typing, ctrl+g, an edit at the start, undo and a txt export show and
hold exactly the writer's characters, while ``<bos>`` stays first in the tree.

Before special tokens became tokens only, the document showed a literal ``<bos>``,
every edit at the start added another and landed 5 characters off, ctrl+g moved the
last typed word to a side branch, and the export began ``<bos><bos>``. Token healing's
default (auto) leaves this whole last word as typed.
"""

from __future__ import annotations

import time

import pytest

from loomterm.config.locations import documents_dir
from loomterm.sessions.session import load_session, session_path
from tests.tui.test_tmux import document_lines, idle

pytestmark = pytest.mark.gemma

TYPED = "Once upon a time there was a girl"


def joined(screen: str) -> str:
    return " ".join(document_lines(screen))


def test_gemma_in_a_real_terminal_holds_only_the_typed_text(tmux_run, gemma_dir, tmp_path):
    args = ["--model", "gemma3-270m", "--device", "cpu", "--threads", "1", "-s", "gemma"]
    args += ["--max-new-tokens", "12"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, timeout=120, what="the editor")
    term.wait_for(idle, timeout=180, what="Gemma to load")

    term.keys(TYPED, literal=True)
    screen = term.wait_for(lambda s: TYPED in s and idle(s), timeout=120, what="typing synced")
    assert document_lines(screen)[0] == TYPED  # no <bos> before it
    assert "<bos>" not in screen

    term.keys("C-g")
    screen = term.wait_for(
        lambda s: idle(s) and len(joined(s)) > len(TYPED) + 5, timeout=180, what="ctrl+g"
    )
    generated = joined(screen)
    assert generated.startswith(TYPED) and "<bos>" not in screen
    data = load_session(session_path("gemma"))
    written = data.path_text()
    assert written.startswith(TYPED)
    # Token healing (auto, the default) leaves a whole word as typed: no side branch.
    assert "[2]" not in screen  # the typed text was not cut
    model_node = data.cursor_node
    assert "healed" not in model_node.meta
    assert data.text(model_node.parent).endswith("a girl")  # generated after the last word

    # An edit at the start lands at char 0 (after <bos>, which stays first).
    term.keys("C-Home")
    term.keys("Long ago. ", literal=True)
    screen = term.wait_for(
        lambda s: idle(s) and joined(s).startswith("Long ago. Once upon"),
        timeout=120,
        what="the edit at the start",
    )
    data = load_session(session_path("gemma"))
    assert data.path_text() == "Long ago. " + written
    assert data.cursor_node.path_tokens()[0] == 2  # Gemma's <bos>, once, first
    assert data.cursor_node.path_tokens().count(2) == 1

    # Undo: whatever branch it shows holds <bos> once, first, and never as text. (An
    # undo of typing at the start branches again instead of putting the old text back,
    # on any model, with or without <bos>: left to the editor's history.)
    term.keys("C-z")
    screen = term.wait_for(idle, timeout=60, what="the undo")
    assert "<bos>" not in screen
    data = load_session(session_path("gemma"))
    tokens = data.cursor_node.path_tokens()
    assert tokens[0] == 2 and tokens.count(2) == 1 and "<bos>" not in data.path_text()
    # Back to the first branch, the typed text and its generation.
    for _ in range(8):
        if joined(screen) == generated:  # (the typed spelling's branch starts so too)
            break
        term.keys("M-Left")
        screen = term.wait_for(idle, timeout=60, what="the previous sibling")
    assert joined(screen) == generated, screen

    # Export as plain text.
    term.keys("C-e")
    term.wait_for(lambda s: "Export" in s and "Format" in s, what="the export dialog")
    term.keys("Enter")
    term.wait_for(lambda s: "Plain text" in s, what="the format list")
    term.keys("Down")
    term.keys("Enter")
    term.wait_for(lambda s: "gemma.txt" in s, what="the txt format")
    term.keys("C-s")
    exported = documents_dir() / "gemma.txt"  # where the export dialog starts
    deadline = time.monotonic() + 30
    while not exported.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert exported.exists(), term.screen()
    term.keys("C-q")
    assert term.exit_status() == "0"
    data = load_session(session_path("gemma"))
    assert data.path_text() == written
    # The path's text exactly, a final newline added where it has none (render_text).
    assert exported.read_text(encoding="utf-8") == written + (
        "" if written.endswith("\n") else "\n"
    )
