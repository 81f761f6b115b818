"""Showing untrusted text safely in the editor: ``loomterm.sanitize`` (the one road to
the terminal, headless) plus the cells a character takes on screen.

Every character the document shows goes through :func:`display` (control pictures for
C0 controls, escapes for C1 and format characters, a tab as four spaces); ``\\n`` never
reaches it: the layout splits lines on it. Everything else from outside (names, server
messages, notes, paths) is made one safe line by :func:`safe_line` and shown as plain
text, never as markup (:func:`plain`).
"""

from __future__ import annotations

from functools import lru_cache

from rich.cells import get_character_cell_size
from rich.text import Text
from textual.content import Content

from loomterm.sanitize import TAB, display, safe, safe_line, safe_text

__all__ = [
    "TAB",
    "cells",
    "char_cells",
    "display",
    "plain",
    "plain_text",
    "safe",
    "safe_line",
    "safe_text",
]


def plain(text: object) -> Content:
    """``text`` as one safe line of plain content: a widget shows it as it is, whatever
    brackets it holds (a str given to a widget is read as markup)."""
    return Content(safe_line(text))


def plain_text(text: object) -> Text:
    """``text`` as one safe line in a rich ``Text`` (a table cell given a str reads
    it as markup)."""
    return Text(safe_line(text), end="")


@lru_cache(maxsize=8192)
def char_cells(char: str) -> int:
    """Cells one character takes on screen once made safe."""
    shown, escaped = display(char)
    if escaped or len(shown) > 1:
        return len(shown)
    return get_character_cell_size(shown)


def cells(text: str) -> int:
    """Cells ``text`` takes on screen once made safe (no newlines)."""
    if text.isascii() and text.isprintable():
        return len(text)
    return sum(char_cells(char) for char in text)
