"""Pastes are text: the input parser hands a bracketed paste on whole and in order,
whatever bytes it holds, and the document keeps a terminal's CR line breaks as lines.
(``test_tmux.py`` pastes the same bytes through a real terminal.)"""

from __future__ import annotations

import time

from textual import events

from loomterm.tui.paste import paste_text
from loomterm.tui.terminal.parser import TerminalParser
from tests.tui.conftest import TERMINAL, paste, settle
from tests.tui.screen_text import screen_text

START, END = "\x1b[200~", "\x1b[201~"


def parsed(*chunks: str) -> list[tuple[str, str]]:
    """What the parser makes of ``chunks`` fed one after another: (kind, key or text)."""
    parser = TerminalParser()
    out: list[object] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    time.sleep(0.15)  # past the escape delay: a held ESC is a key
    out += parser.tick()
    return [
        ("paste", e.text) if isinstance(e, events.Paste) else ("key", e.key)
        for e in out
        if isinstance(e, (events.Paste, events.Key))
    ]


def test_an_escape_sequence_inside_a_paste_stays_in_the_paste_in_order():
    assert parsed(f"a{START} CCC\x1b[31mDDD\x1b[0m EEE{END}b") == [
        ("key", "a"),
        ("paste", " CCC\x1b[31mDDD\x1b[0m EEE"),
        ("key", "b"),
    ]


def test_control_characters_in_a_paste_are_never_keys():
    text = "bel\x07 tab\t soh\x01 osc\x1b]0;title\x07 st\x1b\\ lone esc\x1b end\r"
    assert parsed(START + text + END) == [("paste", text)]


def test_markers_split_across_reads_and_keys_around_them():
    chunks = [*START, "he", "\x1b", "[3", "1m", *END, "\x1b[A", "\x1b"]
    assert parsed(*chunks) == [("paste", "he\x1b[31m"), ("key", "up"), ("key", "escape")]


def test_escape_then_a_paste_at_once():
    assert parsed(f"\x1b{START}x{END}") == [("key", "escape"), ("paste", "x")]


def test_keys_that_share_the_marker_prefix_are_still_keys():
    # insert (ESC [2~) and F9 (ESC [20~) begin like the paste marker.
    assert parsed("\x1b[2~", "\x1b[20~", "\x1bs") == [
        ("key", "insert"),
        ("key", "f9"),
        ("key", "alt+s"),
    ]


def test_paste_text_turns_cr_and_crlf_into_line_breaks():
    assert paste_text("a\rb\r\nc\n\rd") == "a\nb\nc\n\nd"
    assert paste_text("plain") == "plain"


async def test_pasted_cr_line_breaks_are_lines_in_the_document_and_the_engine(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "First line.\rSecond line.\r\nThird.")
        await settle(pilot)
        assert app.doc.text == "First line.\nSecond line.\nThird."
        assert loom.text(loom.cursor) == "First line.\nSecond line.\nThird."
        shown = screen_text(app)
        assert "\u240d" not in shown and "First line." in shown and "Second line." in shown
        assert app.doc.line_count >= 3


def test_typed_crlf_is_one_line_break_and_a_bare_lf_is_ctrl_j():
    assert parsed("a\r\nb\nc\rd\r\r\n") == [
        ("key", "a"),
        ("key", "enter"),
        ("key", "b"),
        ("key", "ctrl+j"),
        ("key", "c"),
        ("key", "enter"),
        ("key", "d"),
        ("key", "enter"),
        ("key", "enter"),
    ]
