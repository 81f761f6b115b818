"""loomterm's terminal input parser: the characters a terminal sends, as Textual events.

It reads what Textual 8.2's parser reads, with the same events (keys by the same names,
SGR mouse reports, focus in and out, the terminal's replies Textual's driver asks for),
and differs where loomterm needs it to:

* A bracketed paste (``ESC [ 200 ~`` ... ``ESC [ 201 ~``) is collected raw and handed on
  as one :class:`textual.events.Paste`, in order and whole (NUL aside, as Textual drops
  it), whatever it holds. Textual's parser goes hunting for key sequences at an ESC
  inside a paste and reissues what it read as key presses ahead of the paste, so the
  text came reordered and a pasted BEL (ctrl+g), TAB or ``\\x01`` ran a binding.
  Keys begun before a paste are keys, and come first.
* Outside a paste a CR is the enter key and a lone LF is ctrl+j (the document takes
  both as a line break); the LF of a CRLF pair is dropped, so CRLF is one line break,
  as it is inside a paste.

The parser is plain: :meth:`TerminalParser.feed` takes text and returns the events it
completed; :meth:`TerminalParser.tick`, called now and then, turns a lone ESC or an
unfinished sequence into keys once the escape delay has passed since its last
character (Textual's ``ESCDELAY``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Final

from textual import constants, events, messages
from textual.message import Message

from loomterm.tui.terminal.keys import IGNORED, sequence_keys

ESC: Final = "\x1b"
PASTE_START: Final = "\x1b[200~"
"""What the terminal sends before a bracketed paste."""
PASTE_END: Final = "\x1b[201~"
"""What the terminal sends after a bracketed paste."""
FOCUS_IN: Final = "\x1b[I"
FOCUS_OUT: Final = "\x1b[O"

LONGEST_SEQUENCE: Final = 32
"""An ESC sequence longer than this is no sequence: its characters are keys."""

_MOUSE: Final = re.compile(r"^\x1b\[(<?[-\d;]+[mM]|M...)\Z")
_SGR_MOUSE: Final = re.compile(r"\x1b\[<(\d+);(-?\d+);(-?\d+)([Mm])")
_MODE_REPORT: Final = re.compile(r"^\x1b\[\?(?P<mode>\d+);(?P<setting>\d)\$y")
_CURSOR_POSITION: Final = re.compile(r"\x1b\[(?P<row>\d+);(?P<column>\d+)R")
_IN_BAND_RESIZE: Final = re.compile(
    r"\x1b\[48;(\d+(?:\:.*?)?);(\d+(?:\:.*?)?);(\d+(?:\:.*?)?);(\d+(?:\:.*?)?)t"
)
_SCROLLS: Final = (
    events.MouseScrollUp,
    events.MouseScrollDown,
    events.MouseScrollLeft,
    events.MouseScrollRight,
)

# iTerm2 misreads in-band resizing, so Textual leaves it off there (and so does this).
IS_ITERM: Final = (
    os.environ.get("LC_TERMINAL", "") == "iTerm2"
    or os.environ.get("TERM_PROGRAM", "") == "iTerm.app"
)


class TerminalParser:
    """Terminal input to Textual events; see the module docstring.

    Two layers: pastes and CRLF are taken out first (a paste start marker is held
    while it may still be one), and the rest goes to the escape-sequence reader."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` tells the time in seconds, for the escape delay (a test's own)."""
        self.clock = clock
        self.out: list[Message] = []
        self.held = ""  # characters that may begin a paste start marker, not passed on
        self.paste: list[str] | None = None  # the paste so far, while inside one
        self.after_cr = False  # the last character passed on was a CR
        self.sequence = ""  # an ESC sequence begun and not yet complete
        self.deadline: float | None = None  # when a held ESC or a sequence times out
        self.mouse = MouseReader()

    # -- the paste layer --------------------------------------------------------------
    def feed(self, text: str) -> list[Message]:
        """Read ``text`` (any part of the input; sequences may be split across calls)
        and return the events it completed, in order."""
        for char in text:
            self.deadline = None
            self.take(char)
            if self.paste is None and (self.held or self.sequence):
                self.deadline = self.clock() + constants.ESCAPE_DELAY
        return self.drain()

    def tick(self) -> list[Message]:
        """The events of a lone ESC or an unfinished sequence whose escape delay has
        passed (keys, as Textual reads them then); call it now and then."""
        if self.deadline is not None and self.clock() >= self.deadline:
            self.deadline = None
            self.time_out()
        return self.drain()

    def close(self) -> list[Message]:
        """The end of the input: whatever is pending, as events."""
        if self.paste:
            self.emit(events.Paste("".join(self.paste).replace("\x00", "")))
        self.paste = None
        self.give(self.held)
        self.held = ""
        if self.sequence:
            self.flush_sequence(alt=True)
        self.deadline = None
        return self.drain()

    def drain(self) -> list[Message]:
        out, self.out = self.out, []
        return out

    def emit(self, message: Message) -> None:
        self.out.append(message)

    def take(self, char: str) -> None:
        """One character, through the paste layer."""
        if self.paste is not None:
            self.paste.append(char)
            if char == PASTE_END[-1] and "".join(self.paste[-len(PASTE_END) :]) == PASTE_END:
                text = "".join(self.paste[: -len(PASTE_END)])
                self.paste = None
                self.emit(events.Paste(text.replace("\x00", "")))
            return
        if char == "\n" and self.after_cr and not self.held:
            self.after_cr = False
            return  # CRLF: the CR was the line break
        self.after_cr = char == "\r"
        candidate = self.held + char
        if PASTE_START.startswith(candidate):
            self.held = candidate
            if candidate == PASTE_START:
                self.held = ""
                self.paste = []
                if self.sequence:  # keys begun before the paste are keys, and come first
                    self.time_out()
        elif char == ESC:  # a marker may begin here still
            self.give(self.held)
            self.held = char
        else:
            self.held = ""
            self.give(candidate)

    def time_out(self) -> None:
        """The escape delay passed: a held marker start is input after all, and an
        unfinished sequence is keys."""
        if self.held:
            self.give(self.held)
            self.held = ""
        if self.sequence:
            self.flush_sequence(alt=True)

    # -- the escape-sequence reader ---------------------------------------------------
    def give(self, text: str) -> None:
        """Characters past the paste layer: keys, sequences and replies."""
        for char in text:
            if not self.sequence:
                if char == ESC:
                    self.sequence = ESC
                else:
                    self.keys(sequence_keys(char))
            elif char == ESC:  # a new sequence begins: the one before is keys
                self.flush_sequence(alt=False)
                self.sequence = ESC
            else:
                self.sequence += char
                if len(self.sequence) > LONGEST_SEQUENCE:
                    self.flush_sequence(alt=False)
                elif self.complete(self.sequence):
                    self.sequence = ""

    def keys(self, keys: list[events.Key]) -> None:
        self.out.extend(key for key in keys if key.key != IGNORED)

    def flush_sequence(self, alt: bool) -> None:
        """An unfinished sequence, as Textual reissues it: character by character, the
        first ESC an ``alt+`` on the next when timed out (``alt``), or a ``^`` key when
        cut short by another ESC or its length."""
        sequence, self.sequence = self.sequence, ""
        if sequence == ESC:
            self.emit(events.Key("escape", ESC))
            return
        after_esc = False
        for char in sequence:
            if alt and char == ESC:
                after_esc = True
                continue
            for key in sequence_keys(char, alt=after_esc):
                if key.key == "escape" and not alt:
                    key = events.Key("circumflex_accent", "^")
                self.emit(key)
            after_esc = False

    def complete(self, sequence: str) -> bool:
        """Whether ``sequence`` (ESC and more) is complete; if so its events are out.
        In Textual's order: focus, in-band resize, cursor position, keys, mouse, mode
        reports (a CSI ``1;2R`` is a cursor position before it is shift+F3)."""
        if sequence in (FOCUS_IN, FOCUS_OUT, PASTE_START, PASTE_END):
            if sequence == FOCUS_IN:
                self.emit(events.AppFocus())
            elif sequence == FOCUS_OUT:
                self.emit(events.AppBlur())
            return True  # a stray paste marker outside a paste is dropped
        if match := _IN_BAND_RESIZE.fullmatch(sequence):
            self.emit(self.mouse.resized(*(int(g.partition(":")[0]) for g in match.groups())))
            return True
        if match := _CURSOR_POSITION.match(sequence):
            self.emit(events.CursorPosition(int(match["column"]) - 1, int(match["row"]) - 1))
            return True
        if keys := sequence_keys(sequence):
            self.keys(keys)
            return True
        if _MOUSE.match(sequence):
            if (mouse := self.mouse.read(sequence)) is not None:
                self.emit(mouse)
            return True
        if match := _MODE_REPORT.match(sequence):
            if (reply := mode_reply(match["mode"], int(match["setting"]))) is not None:
                self.emit(reply)
            return True
        return False


def mode_reply(mode: str, setting: int) -> Message | None:
    """The message for the terminal's DECRPM reply about ``mode``: synchronized output
    (2026) supported, or in-band resize (2048) supported or not; other modes: none."""
    if mode == "2026" and setting > 0:
        return messages.TerminalSupportsSynchronizedOutput()
    if mode == "2048" and constants.SMOOTH_SCROLL and not IS_ITERM:
        return messages.InBandWindowResize.from_setting_parameter(setting)
    return None


class MouseReader:
    """SGR mouse reports as Textual's mouse events. It keeps the last position (for
    the deltas) and, once the terminal reports its size in pixels (in-band resize),
    reads pixel coordinates as cells."""

    def __init__(self) -> None:
        self.last_x = 0.0
        self.last_y = 0.0
        self.pixels = False
        self.cells: tuple[int, int] | None = None
        self.pixel_size: tuple[int, int] | None = None

    def resized(self, height: int, width: int, pixel_height: int, pixel_width: int) -> Message:
        """The terminal's in-band resize report, as a resize event; mouse reports are
        in pixels from now on (Textual asks for them with in-band resizing)."""
        resize = events.Resize.from_dimensions((width, height), (pixel_width, pixel_height))
        self.cells = (width, height)
        self.pixel_size = (pixel_width, pixel_height)
        self.pixels = True
        return resize

    def read(self, code: str) -> events.MouseEvent | None:
        """The mouse event of an SGR report, or ``None`` (another mouse encoding, or a
        negative position, which Ghostty has been seen to send)."""
        match = _SGR_MOUSE.match(code)
        if match is None:
            return None
        buttons = int(match[1])
        x, y = float(int(match[2]) - 1), float(int(match[3]) - 1)
        if x < 0 or y < 0:
            return None
        if self.pixels and self.cells is not None and self.pixel_size is not None:
            x /= self.pixel_size[0] / self.cells[0]
            y /= self.pixel_size[1] / self.cells[1]
        delta_x, delta_y = int(x) - int(self.last_x), int(y) - int(self.last_y)
        self.last_x, self.last_y = x, y
        kind: type[events.MouseEvent]
        if buttons & 64:
            kind, button = _SCROLLS[buttons & 3], 0
        else:
            button = (buttons + 1) & 3
            # A motion report (bit 32) or one with no button held is a move.
            if buttons & 32 or button == 0:
                kind = events.MouseMove
            else:
                kind = events.MouseDown if match[4] == "M" else events.MouseUp
        shift, meta, ctrl = bool(buttons & 4), bool(buttons & 8), bool(buttons & 16)
        return kind(None, x, y, delta_x, delta_y, button, shift, meta, ctrl, screen_x=x, screen_y=y)
