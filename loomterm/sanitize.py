"""The one road from outside text to a terminal.

Model output, server messages, model and session names, notes, imported fields and file
paths may hold control characters and escape sequences. Written raw, ``ESC [ 2 J``
clears the user's screen, ``ESC ] 52`` writes their clipboard, ``ESC ] 0`` retitles
the window and a bidi override reorders what they read. Every string from outside
reaches the screen through this module (headless: the command line uses it directly,
``loomterm.tui.sanitize`` adds cell widths for the editor):

- C0 controls become their Unicode control pictures (``ESC`` -> ``␛``, ``NUL`` -> ``␀``),
  one cell each, so an escape sequence stays readable as ``␛[2J`` and does nothing;
- DEL becomes ``␡``; C1 controls (``\\x9b`` is a one-byte CSI), format characters (bidi
  overrides, zero-width joiners), line/paragraph separators and unassigned code points
  become ``\\x9b`` or ``\\u202e`` escapes.

Which function:

- :func:`safe_line` for anything shown on one line (a status or error line, a name, a
  label, a notification): newlines become ``⏎``;
- :func:`safe_text` for document text shown in a terminal: newlines and tabs kept;
- :func:`for_stream` for document text written to a stream: byte-exact when the stream
  is a pipe or a file (a writer piping ``loomterm generate`` to a file expects their
  text), :func:`safe_text` when it is a terminal.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import TextIO

TAB = "    "  # the editor wraps by cells, not tab stops
NEWLINE_MARK = "\u23ce"  # ⏎
# Categories str.isprintable() rejects that are nonetheless safe and visible.
_SAFE_SPACES = frozenset({"Zs"})


@lru_cache(maxsize=8192)
def display(char: str) -> tuple[str, bool]:
    """How one character is shown: ``(text, escaped)``; ``escaped`` marks stand-ins.
    A tab is four spaces (``TAB``); a newline is its control picture (callers that keep
    lines split on it first)."""
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
    """``text`` with every unsafe character replaced by its stand-in (a newline too)."""
    if text.isprintable():
        return text
    return "".join(display(char)[0] for char in text)


def safe_line(text: object) -> str:
    """``text`` (any object: its ``str``) as one safe line: newlines become ``⏎``."""
    text = str(text)
    if text.isprintable():
        return text
    return safe(text.replace("\r\n", "\n").replace("\n", NEWLINE_MARK))


def safe_text(text: str) -> str:
    """Document text made safe for a terminal, its newlines and tabs kept."""
    if text.isprintable():
        return text
    return "\n".join(_safe_row(row) for row in text.split("\n"))


def _safe_row(row: str) -> str:
    if row.isprintable():
        return row
    return "".join("\t" if char == "\t" else display(char)[0] for char in row)


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal (a closed or odd stream counts as one: the
    safe side)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return True


def for_stream(text: str, stream: TextIO) -> str:
    """Document text to write to ``stream``: as it is for a pipe or a file, made safe
    (:func:`safe_text`) for a terminal."""
    return safe_text(text) if is_terminal(stream) else text


def say(text: object, stream: TextIO | None = None) -> None:
    """Write one status or error line (to stderr by default), always made safe: such a
    line names files, models and servers, and carries servers' own messages."""
    import sys

    out = stream if stream is not None else sys.stderr
    out.write(safe_line(text) + "\n")
    out.flush()
