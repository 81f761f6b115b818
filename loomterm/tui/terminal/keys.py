"""Key sequences to key presses: what one sequence (or one character) the terminal
sent means, as Textual's :class:`textual.events.Key` events.

The naming follows Textual 8.2's parser so bindings written in Textual's key names
match: a kitty-protocol (CSI u) reading first, then the sequence table
(:mod:`loomterm.tui.terminal.keytable`), then a single character named by its Unicode
name (``alt+`` when an ESC came before it).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from textual import constants, events

from loomterm.tui.terminal.keytable import (
    IGNORED_SEQUENCES,
    NAME_REPLACEMENTS,
    SEQUENCE_CHARACTERS,
    SEQUENCE_KEYS,
    UNNAMED_CHARACTERS,
)
from loomterm.tui.terminal.kitty_keys import FUNCTIONAL_KEYS, MODIFIER_KEYS

IGNORED: Final = "<ignore>"
"""The key name of a sequence read and dropped (Textual's ``Keys.Ignore``)."""

# CSI <code point>[:alternates] ; <modifiers> ; <text> <final byte>: the kitty keyboard
# protocol, which also reads the legacy CSI forms of arrows and function keys.
_KITTY: Final = re.compile(r"\x1b\[((?:[\d:]*;?){2,3})([u~ABCDEFHPQRS])")

_MODIFIERS: Final = ("alt", "ctrl", "super", "hyper", "meta")
"""The kitty modifier bits above shift, in bit order (caps and num lock left out)."""

_SPECIAL_CHARACTERS: Final = {"backspace": "\x7f", "enter": "\r", "tab": "\t"}
"""The character an unmodified kitty-protocol key of these names types."""


def character_key(character: str) -> str:
    """The key name of one typed character: itself when a letter or digit, else its
    Unicode name in snake case (``!`` is ``exclamation_mark``)."""
    if character.isalnum():
        key = character
    else:
        try:
            key = unicodedata.name(character).lower().replace("-", "_").replace(" ", "_")
        except ValueError:  # a control character has no Unicode name
            key = UNNAMED_CHARACTERS.get(character, character)
    return NAME_REPLACEMENTS.get(key, key)


def sequence_keys(sequence: str, alt: bool = False) -> list[events.Key]:
    """The key presses ``sequence`` stands for, or none if it is no (complete) key.

    A sequence Textual ignores gives one key named :data:`IGNORED` (the caller drops it
    but knows the sequence is complete). ``alt`` is set for a character that followed
    an ESC which made no sequence with it."""
    if not constants.DISABLE_KITTY_KEY:
        kitty = kitty_keys(sequence)
        if kitty is not None:
            return kitty
    if sequence in IGNORED_SEQUENCES:
        return [events.Key(IGNORED, sequence)]
    names = SEQUENCE_KEYS.get(sequence)
    if names is not None:
        character = sequence if len(sequence) == 1 else None
        return [events.Key(name, character) for name in names]
    sequence = SEQUENCE_CHARACTERS.get(sequence, sequence)
    if len(sequence) != 1:
        return []
    name = character_key(sequence)
    if len(name) == 1 and alt:
        if name.isupper():
            name = f"shift+{name.lower()}"
        name = f"alt+{name}"
    return [events.Key(name, sequence)]


def kitty_keys(sequence: str) -> list[events.Key] | None:
    """The keys of a kitty keyboard protocol (or legacy CSI) sequence, or ``None`` if
    ``sequence`` is not one. Numbers that make no character read as no sequence
    (Textual's parser would raise on them)."""
    match = _KITTY.fullmatch(sequence)
    if match is None:
        return None
    codes, end = match.groups(default="")
    code_text, modifier_text, text, *_ = [*codes.split(";"), "", "", ""]
    try:
        code = int(code_text or "1")
        modifiers = int(modifier_text or "0")
        texts = _texts(text)
        default = chr(code)
    except (ValueError, OverflowError):
        return None
    keys = []
    for typed in texts:
        key = FUNCTIONAL_KEYS.get(f"{code}{end}", "") or character_key(typed or default)
        tokens = _modifier_names(key, modifiers, typed) if modifiers else []
        tokens.sort()
        tokens.append(key)
        character = typed or (None if modifiers else _SPECIAL_CHARACTERS.get(key))
        keys.append(events.Key("+".join(tokens), character))
    return keys


def _texts(text: str) -> list[str | None]:
    """The characters a kitty sequence's text field holds (colon-separated code
    points; a part that is no number is ``\\x01``), or ``[None]`` when it has none."""
    if not text:
        return [None]
    return [chr(int(part)) if part.isdecimal() else chr(1) for part in text.split(":")]


def _modifier_names(key: str, modifiers: int, typed: str | None) -> list[str]:
    """The modifier names a kitty key carries: shift only where no character shows it,
    alt only where no character was typed (the character already holds them)."""
    if key in MODIFIER_KEYS:
        return []
    bits = modifiers - 1
    names = ["shift"] if bits & 1 and (typed is None or typed.isspace()) else []
    for bit, modifier in enumerate(_MODIFIERS, 1):
        if modifier == "alt" and typed is not None:
            continue
        if bits & (1 << bit):
            names.append(modifier)
    return names
