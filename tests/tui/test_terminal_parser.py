"""loomterm's terminal parser reads what Textual's own parser reads, event for event.

The ORACLE is Textual's private ``XTermParser`` (``textual._xterm_parser``), imported
here and only here (tests may use it as the reference; loomterm itself may not): every
sequence of Textual's key table, every kitty functional key with every modifier, every
ASCII character, and random streams of keys, mouse reports, focus events, terminal
replies, timeouts and pastes without an ESC in them, cut into random reads, must give
the same events (type, key and character, mouse fields, paste text) from both.
A Textual release that moves its parser skips this file, saying so (a release that
changes what it reads fails it): the key tables (``loomterm/tui/terminal/keytable.py``,
``kitty_keys.py``) are a port of 8.2's and may need the new release's entries; point
the oracle at the new parser and compare again.

Left out of the comparison, where loomterm reads differently on purpose (its own tests
are in ``test_paste.py``): a paste holding an ESC, an unfinished sequence cut short by
a paste, and LF after CR (CRLF outside a paste is one enter here).
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from textual import constants, events, messages

from loomterm.tui.terminal.parser import TerminalParser

MOVED = (
    "Textual's own parser, this test's oracle, is not where 8.2 kept it: port the new "
    "release's key tables and point the oracle anew"
)
XTermParser = pytest.importorskip("textual._xterm_parser", reason=MOVED).XTermParser
ANSI_SEQUENCES_KEYS = pytest.importorskip(
    "textual._ansi_sequences", reason=MOVED
).ANSI_SEQUENCES_KEYS
FUNCTIONAL_KEYS = pytest.importorskip("textual._keyboard_protocol", reason=MOVED).FUNCTIONAL_KEYS

PAUSE = None  # a stream element: the escape delay passes (both parsers time out)


class Clock:
    """A clock the test moves by hand, for both parsers' escape delay."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def summary(event: object) -> tuple[object, ...]:
    """What must match: the event's type and the fields its consumers read."""
    kind = type(event).__name__
    if isinstance(event, events.Key):
        return (kind, event.key, event.character)
    if isinstance(event, events.MouseEvent):
        fields = ("x", "y", "delta_x", "delta_y", "button", "shift", "meta", "ctrl")
        return (kind, *(getattr(event, f) for f in fields), event.screen_x, event.screen_y)
    if isinstance(event, events.Paste):
        return (kind, event.text)
    if isinstance(event, events.Resize):
        return (kind, event.size, event.pixel_size)
    if isinstance(event, events.CursorPosition):
        return (kind, event.x, event.y)
    if isinstance(event, messages.InBandWindowResize):
        return (kind, event.supported, event.enabled)
    return (kind,)


def run_ours(segments: list[list[str]]) -> list[tuple[object, ...]]:
    clock = Clock()
    parser = TerminalParser(clock=clock)
    out: list[object] = []
    for chunks in segments:
        for chunk in chunks:
            out += parser.feed(chunk)
        clock.now += 1.0
        out += parser.tick()
    out += parser.close()
    return [summary(event) for event in out]


def run_oracle(segments: list[list[str]]) -> list[tuple[object, ...]]:
    clock = Clock()
    with mock.patch("textual._parser.get_time", clock):
        parser = XTermParser()
        out: list[object] = []
        for chunks in segments:
            for chunk in chunks:
                out += parser.feed(chunk)
            clock.now += 1.0
            out += parser.tick()
        out += parser.feed("")
    return [summary(event) for event in out]


def assert_same(segments: list[list[str]]) -> None:
    try:
        expected = run_oracle(segments)
    except (ValueError, OverflowError):
        reject()  # input Textual's parser raises on (kitty numbers that are no character)
    assert run_ours(segments) == expected, segments


def each(sequences: Iterable[str]) -> None:
    """Each sequence alone, and followed by a character (a sequence must end where
    Textual's ends), and timed out half way."""
    for sequence in sequences:
        assert_same([[sequence]])
        assert_same([[sequence + "x"]])
        if len(sequence) > 1:
            half = len(sequence) // 2
            assert_same([[sequence[:half]], [sequence[half:]]])


def test_every_sequence_of_textuals_key_table():
    each(ANSI_SEQUENCES_KEYS)


def test_every_sequence_of_textuals_key_table_with_the_kitty_protocol_off():
    # TEXTUAL_DISABLE_KITTY_KEY: the table's CSI entries the kitty reading shadows.
    with mock.patch.object(constants, "DISABLE_KITTY_KEY", True):
        each(ANSI_SEQUENCES_KEYS)


def test_every_kitty_functional_key_with_every_modifier():
    each(
        f"\x1b[{code[:-1]}{f';{modifiers}' if modifiers else ''}{code[-1]}"
        for code in FUNCTIONAL_KEYS
        for modifiers in range(17)
    )


def test_every_ascii_character_and_alt_with_it():
    characters = [chr(n) for n in range(1, 128) if chr(n) != "\n"] + ["é", "¡", "€", "漢"]
    each(characters)
    each("\x1b" + c for c in characters)
    each(f"\x1b[{ord(c)};{m}u" for c in characters for m in (1, 2, 3, 5, 9))
    # with the text typed (kitty's "report associated text"), upper case for shift
    each(f"\x1b[{ord(c)};{m};{ord(c.upper())}u" for c in characters for m in (1, 2, 3, 6))


# -- random streams, in random reads ------------------------------------------------------
TEXT = st.text(
    alphabet=string.ascii_letters + string.digits + " !\"#$%&'()*+,-./;<=>?@[\\]^_`{|}~"
    "\r\t\x00\x01\x07\x08\x7féñ¡漢",
    min_size=1,
    max_size=6,
)
KEYS = st.sampled_from(sorted(ANSI_SEQUENCES_KEYS)) | st.builds(
    "\x1b[{}{}{}".format,
    st.sampled_from(["1", "2", "3", "5", "6", "15", "17", "24", "97", "13", "27", "57441"]),
    st.sampled_from(["", ";2", ";3", ";5", ";6", ";9", ";5;97", ";2;65", ";3;97", ";2;32"]),
    st.sampled_from("u~ABCDFHPQS"),
)
MOUSE = st.builds(
    "\x1b[<{};{};{}{}".format,
    st.sampled_from([0, 1, 2, 3, 32, 34, 35, 64, 65, 66, 67]).flatmap(
        lambda b: st.sampled_from([b, b | 4, b | 8, b | 16])
    ),
    st.integers(0, 240),
    st.integers(0, 70),
    st.sampled_from("Mm"),
)
REPLIES = st.sampled_from(["\x1b[I", "\x1b[O"]) | st.builds(
    lambda mode, setting: f"\x1b[?{mode};{setting}$y",
    st.sampled_from([2026, 2048, 1004]),
    st.integers(0, 4),
)
POSITIONS = st.builds("\x1b[{};{}R".format, st.integers(1, 60), st.integers(1, 200))
RESIZES = st.builds(
    "\x1b[48;{};{};{};{}t".format,
    st.integers(10, 60),
    st.integers(20, 200),
    st.integers(100, 900),
    st.integers(200, 1800),
)
PASTES = st.builds(
    "\x1b[200~{}\x1b[201~".format,
    st.text(alphabet="ab \r\n\t\x00\x07\x01é", max_size=8),
)
UNFINISHED = (KEYS | MOUSE).map(lambda s: s[: max(1, len(s) - 1)])  # cut by what follows
ELEMENTS = st.one_of(
    TEXT, KEYS, KEYS, MOUSE, REPLIES, POSITIONS, RESIZES, st.just("\x1b"), UNFINISHED
)


@st.composite
def streams(draw: st.DrawFn) -> list[list[str]]:
    """Segments (between escape-delay pauses) of reads (chunks)."""
    elements = draw(st.lists(ELEMENTS | PASTES | st.just(PAUSE), min_size=1, max_size=12))
    segments: list[str] = [""]
    for element in elements:
        if element is PAUSE:
            segments.append("")
        elif element.startswith("\x1b[200~"):
            # After a pause: a sequence left unfinished by a paste is keys with alt here
            # (the paste times it out) and without in Textual's (an ESC cut it short).
            segments.append(element)
        else:
            segments[-1] += element
    return [chunked(draw, segment) for segment in segments]


def chunked(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut into non-empty reads at random places."""
    if len(text) < 2:
        return [text] if text else []
    cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=6)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_random_streams_in_random_reads_read_as_textuals_parser_reads_them(segments):
    assert_same(segments)
