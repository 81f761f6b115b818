"""Showing untrusted text safely in a terminal.

Model output and pasted text may hold control characters and escape sequences. Written
raw, an ``ESC [ 2 J`` would clear the user's screen and a bidi override would reorder
what they read. Every character the document shows goes through :func:`display`:

- C0 controls become their Unicode control pictures (``ESC`` -> ``␛``, ``NUL`` -> ``␀``),
  one cell each, so an escape sequence stays readable as ``␛[2J``;
- DEL becomes ``␡``; C1 controls, format characters (bidi overrides, zero-width
  joiners), line/paragraph separators and unassigned code points become ``\\x9b`` or
  ``\\u202e`` escapes;
- a tab is four spaces (the document wraps by cells, not tab stops).

``\\n`` never reaches here: the layout splits lines on it.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from rich.cells import get_character_cell_size

TAB = "    "
# Categories str.isprintable() rejects that are nonetheless safe and visible.
_SAFE_SPACES = frozenset({"Zs"})


@lru_cache(maxsize=8192)
def display(char: str) -> tuple[str, bool]:
    """How one character is shown: ``(text, escaped)``; ``escaped`` marks stand-ins."""
    if char.isprintable():
        return char, False
    code = ord(char)
    if char == "\t":
        return TAB, False
    if code < 0x20:
        return chr(0x2400 + code), True
    if code == 0x7F:
        return "\u2421", True
    category = unicodedata.category(char)
    if category in _SAFE_SPACES:
        return char, False
    if code <= 0xFF:
        return f"\\x{code:02x}", True
    if code <= 0xFFFF:
        return f"\\u{code:04x}", True
    return f"\\U{code:08x}", True


def safe(text: str) -> str:
    """``text`` with every unsafe character replaced by its stand-in."""
    if text.isprintable():
        return text
    return "".join(display(char)[0] for char in text)


def safe_line(text: str) -> str:
    """Like :func:`safe`, for one-line previews: newlines become ``⏎``."""
    return safe(text.replace("\n", "\u23ce"))


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
