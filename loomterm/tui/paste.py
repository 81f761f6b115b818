"""Pasted text as the document keeps it.

The terminal's bracketed pastes are read whole and in order, whatever bytes they hold,
by loomterm's own input parser (:mod:`loomterm.tui.terminal.parser`). What the paste
holds is then the document's business: :func:`paste_text` turns a terminal's CR and
CRLF line breaks into ``\\n``; control characters stay in the text and are drawn as
symbols (``loomterm.tui.sanitize``).
"""

from __future__ import annotations


def paste_text(text: str) -> str:
    """Pasted text as the document keeps it: CRLF and lone CR (what terminals send for
    a line break) become ``\\n``."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")
