"""Bracketed pastes read as text, whatever they hold.

A terminal in bracketed-paste mode wraps pasted text in ``ESC [ 200 ~`` ... ``ESC [ 201 ~``.
Textual's input parser (8.x) collects a paste only while it holds no ``ESC``: an escape
sequence inside the paste (``CCC ESC[31m DDD``) sends the parser hunting for a key
sequence, and what it read is reissued as *key presses* ahead of the paste, so the text
arrives reordered and a pasted BEL (ctrl+g), TAB or ``\\x01`` runs a binding.

:class:`PasteParser` wraps Textual's parser: outside a paste every character goes to it
unchanged; from a paste start marker to the end marker the characters are collected
raw and handed on as one :class:`textual.events.Paste`, in order and whole (NUL aside,
as Textual drops it). :func:`install` makes the terminal drivers use it.

What the paste holds is then the document's business: :func:`paste_text` turns a
terminal's CR and CRLF line breaks into ``\\n``; control characters stay in the text
and are drawn as symbols (``loomterm.tui.sanitize``).

Outside a paste (typing, or a paste the terminal sends as keys), a CR is the enter key
and a lone LF is ctrl+j (the document takes both as a line break); the LF of a CRLF
pair is dropped here, so CRLF is one line break, as it is inside a paste.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator

from textual import constants, events
from textual._parser import ParseEOF, ParseTimeout, Peek1, Read1
from textual._xterm_parser import BRACKETED_PASTE_END, BRACKETED_PASTE_START, XTermParser

_END_LAST = BRACKETED_PASTE_END[-1]


def paste_text(text: str) -> str:
    """Pasted text as the document keeps it: CRLF and lone CR (what terminals send for
    a line break) become ``\\n``."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


class PasteParser(XTermParser):
    """Textual's terminal parser, with bracketed pastes collected raw (see the module
    docstring)."""

    def parse(
        self, token_callback: Callable[[object], None]
    ) -> Generator[Read1 | Peek1, str, None]:
        """Textual's parse, with pastes collected raw. Over 60 lines and kept whole: one
        generator whose state (``awaiting``, ``held``, ``paste``, ``after_cr``) lives
        across its yields to the driver, so parts of it would have to hand all of it
        back and forth with every character."""
        inner = super().parse(token_callback)
        awaiting: Read1 | Peek1 = next(inner)
        held = ""  # characters that may begin a paste start marker, not yet passed on
        paste: list[str] | None = None  # the paste so far, while inside one
        after_cr = False  # the last character passed on was a CR (an LF next is its pair)

        def give(text: str) -> None:
            nonlocal awaiting
            for char in text:
                awaiting = inner.send(char)

        while True:
            if paste is not None:
                request: Read1 | Peek1 = self.read1()
            elif held:
                request = self.read1(constants.ESCAPE_DELAY)
            else:
                request = awaiting
            try:
                char = yield request
            except ParseTimeout:
                if held:
                    give(held)  # a lone ESC (or ESC [ ...) after all: a key
                    held = ""
                    if awaiting.timeout is None:
                        continue
                awaiting = inner.throw(ParseTimeout())
                continue
            except ParseEOF:
                if paste is not None and paste:
                    token_callback(events.Paste("".join(paste).replace("\x00", "")))
                try:
                    give(held)
                    inner.throw(ParseEOF())
                except StopIteration:
                    pass
                return
            if paste is not None:
                paste.append(char)
                if (
                    char == _END_LAST
                    and len(paste) >= len(BRACKETED_PASTE_END)
                    and "".join(paste[-len(BRACKETED_PASTE_END) :]) == BRACKETED_PASTE_END
                ):
                    text = "".join(paste[: -len(BRACKETED_PASTE_END)])
                    paste = None
                    token_callback(events.Paste(text.replace("\x00", "")))
                continue
            if char == "\n" and after_cr and not held:
                after_cr = False
                continue  # CRLF: the CR was the line break
            after_cr = char == "\r"
            candidate = held + char
            if BRACKETED_PASTE_START.startswith(candidate):
                if candidate == BRACKETED_PASTE_START:
                    held = ""
                    paste = []
                    if awaiting.timeout is not None:
                        # Keys begun before the paste are keys, and come first.
                        awaiting = inner.throw(ParseTimeout())
                else:
                    held = candidate
                continue
            if char == "\x1b":  # a marker may begin here still
                give(held)
                held = char
            else:
                held = ""
                give(candidate)


def install(driver_class: type) -> type:
    """Make ``driver_class`` (a Textual driver) read input with :class:`PasteParser`.

    Textual's drivers build their parser by the module-level name ``XTermParser``; the
    name is pointed at :class:`PasteParser` in the driver's module. Idempotent."""
    module = sys.modules.get(driver_class.__module__)
    if module is not None and getattr(module, "XTermParser", None) is XTermParser:
        # The one ignore left: ``ModuleType`` declares no ``XTermParser`` (the driver's
        # module has it, untyped), and Textual offers no public way to give a driver
        # another parser; ``setattr`` with a constant name is what ruff's B010 refuses.
        module.XTermParser = PasteParser  # type: ignore[attr-defined]
    return driver_class
