"""Python's regular expression syntax read into a small tree: the one reading of a
search pattern that ``loomterm.search.pattern`` writes out for RE2 and
``loomterm.search.reach`` measures.

It reads a subset of what Python's ``re`` reads, the same way, and raises
:class:`Unsupported` on anything else (back-references, conditionals, atomic groups,
possessive repeats, ``(?x)``, octal and named escapes, ...) and on anything ``re``
would refuse: the callers then fall back on the slower, always-right path. It does not
validate: the pattern has already been compiled by ``re``.

The tree is a sequence (a tuple) of ``(kind, value)`` items:

- ``("literal", code)``, ``("not_literal", code)``, ``("any", None)``;
- ``("in", (negate, items))``: a class, ``items`` of ``("literal", code)``,
  ``("range", (low, high))`` and ``("category", name)``, name one of ``DIGIT``,
  ``WORD``, ``SPACE`` or their ``NOT_`` complements (``\\d`` alone is a class of one);
- ``("at", where)``: ``BEGINNING`` (``^``), ``END`` (``$``), ``BEGINNING_STRING``
  (``\\A``), ``END_STRING`` (``\\Z``), ``BOUNDARY`` (``\\b``), ``NON_BOUNDARY``;
- ``("branch", alternatives)``: a tuple of sequences;
- ``("group", (index, add, remove, sequence))``: ``index`` None when it captures
  nothing, ``add``/``remove`` the ``re`` flags it scopes;
- ``("repeat", (low, high, lazy, sequence))``: ``high`` None when unbounded;
- ``("assert", (direction, negative, sequence))``: direction 1 ahead, -1 behind.
"""

from __future__ import annotations

import re
from typing import Any

Item = tuple[str, Any]
Sequence = tuple[Item, ...]

SPECIAL = ".^$*+?{}[]\\|()"
FLAG_LETTERS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "a": re.ASCII}
ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92}
CATEGORIES = {
    "d": "DIGIT",
    "D": "NOT_DIGIT",
    "w": "WORD",
    "W": "NOT_WORD",
    "s": "SPACE",
    "S": "NOT_SPACE",
}
ANCHORS = {"A": "BEGINNING_STRING", "Z": "END_STRING", "b": "BOUNDARY", "B": "NON_BOUNDARY"}
HEX_LENGTHS = {"x": 2, "u": 4, "U": 8}
REPEAT_BOUNDS = re.compile(r"\{([0-9]*)(?:(,)([0-9]*))?\}")  # ASCII digits, as Python's


class Unsupported(Exception):
    """The pattern uses what this reader does not read (or what ``re`` refuses)."""


def parse(pattern: str) -> tuple[Sequence, int]:
    """``(tree, global flags)`` of ``pattern``: its sequence of items and the ``re``
    flags its leading ``(?aims)`` groups set. Raises :class:`Unsupported`."""
    reader = _Reader(pattern)
    tree = reader.alternatives()
    if reader.pos != len(pattern):
        raise Unsupported("unbalanced parenthesis")
    return tree, reader.global_flags


def min_width(items: Sequence) -> int:
    """The fewest characters a match of ``items`` consumes."""
    total = 0
    for kind, value in items:
        if kind in ("literal", "not_literal", "any", "in"):
            total += 1
        elif kind == "branch":
            total += min(min_width(alt) for alt in value)
        elif kind == "group":
            total += min_width(value[3])
        elif kind == "repeat":
            total += value[0] * min_width(value[3])
    return total


def atom_source(item: Item) -> str:
    """One character item (literal, not-literal, any, class) written back out in
    Python's syntax, to be compiled on its own with the flags it was read under."""
    kind, value = item
    if kind == "literal":
        return _char(value)
    if kind == "not_literal":
        return f"[^{_char(value)}]"
    if kind == "any":
        return "."
    if kind == "in":
        negate, members = value
        return "[" + ("^" if negate else "") + "".join(map(_member_source, members)) + "]"
    raise Unsupported(kind)


def _member_source(member: Item) -> str:
    kind, value = member
    if kind == "literal":
        return _char(value)
    if kind == "range":
        return f"{_char(value[0])}-{_char(value[1])}"
    letter = {name: letter for letter, name in CATEGORIES.items()}[value]
    return "\\" + letter


def _char(code: int) -> str:
    return f"\\U{code:08x}"


class _Reader:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.pos = 0
        self.groups = 0
        self.global_flags = 0
        self.started = False  # something other than leading global flags was read

    def peek(self, ahead: int = 0) -> str:
        at = self.pos + ahead
        return self.text[at] if at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise Unsupported("unexpected end of pattern")
        self.pos += 1
        return char

    def alternatives(self) -> Sequence:
        alts = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            alts.append(self.sequence())
        return alts[0] if len(alts) == 1 else (("branch", tuple(alts)),)

    def sequence(self) -> Sequence:
        items: list[Item] = []
        while self.peek() not in ("", "|", ")"):
            if self.leading_flags():
                continue
            self.started = True
            char = self.peek()
            if char in "*+?{" and self.repeat(items):
                continue
            items.append(self.atom())
        return tuple(items)

    def leading_flags(self) -> bool:
        """``(?aimsu)`` at the very start: flags over the whole pattern."""
        if self.started or not self.text.startswith("(?", self.pos):
            return False
        match = re.compile(r"\(\?([a-zA-Z]+)\)").match(self.text, self.pos)
        if match is None:
            return False
        for letter in match.group(1):
            if letter == "u":
                continue
            if letter not in FLAG_LETTERS:
                raise Unsupported(f"flag {letter}")
            self.global_flags |= FLAG_LETTERS[letter]
        self.pos = match.end()
        return True

    def repeat(self, items: list[Item]) -> bool:
        """Applies a repeat to the last item; False when ``{`` is a literal."""
        char = self.peek()
        if char == "{":
            bounds = REPEAT_BOUNDS.match(self.text, self.pos)
            if bounds is None or bounds.group(0) == "{}":
                return False  # not a repeat: "{" is itself
            low_text, comma, high_text = bounds.groups()
            low = int(low_text) if low_text else 0
            if comma:
                high = int(high_text) if high_text else None
            else:
                high = low
            self.pos = bounds.end()
        else:
            self.pos += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        if high is not None and high < low:
            raise Unsupported("min repeat greater than max repeat")
        if low >= 2**31 or (high is not None and high >= 2**31):
            raise Unsupported("repeat too large")
        if not items or items[-1][0] in ("at", "repeat"):
            raise Unsupported("nothing to repeat")
        lazy = self.peek() == "?"
        if lazy:
            self.pos += 1
        elif self.peek() == "+":
            raise Unsupported("possessive repeat")
        target = items.pop()
        items.append(("repeat", (low, high, lazy, (target,))))
        return True

    def atom(self) -> Item:
        char = self.take()
        if char == ".":
            return ("any", None)
        if char == "^":
            return ("at", "BEGINNING")
        if char == "$":
            return ("at", "END")
        if char == "[":
            return self.klass()
        if char == "(":
            return self.group()
        if char == "\\":
            return self.escape()
        if char in "*+?":
            raise Unsupported("nothing to repeat")
        return ("literal", ord(char))  # "{", "}" and "]" included, as in Python

    def escape(self) -> Item:
        char = self.take()
        if char in CATEGORIES:
            return ("in", (False, (("category", CATEGORIES[char]),)))
        if char in ANCHORS:
            return ("at", ANCHORS[char])
        return ("literal", self.code(char))

    def code(self, char: str) -> int:
        """The character of an escape ``\\char`` (its backslash read) that names one."""
        if char in ESCAPES:
            return ESCAPES[char]
        if char in HEX_LENGTHS:
            digits = self.text[self.pos : self.pos + HEX_LENGTHS[char]]
            if len(digits) != HEX_LENGTHS[char] or not all(
                d in "0123456789abcdefABCDEF" for d in digits
            ):
                raise Unsupported("incomplete escape")
            self.pos += len(digits)
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise Unsupported("bad escape")
            return code
        if char.isascii() and char.isalnum():
            raise Unsupported(f"escape \\{char}")  # octal, references, \N{...}, unknown
        return ord(char)

    def klass(self) -> Item:
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        members: list[Item] = []
        first = True
        while True:
            char = self.take()
            if char == "]" and not first:
                break
            first = False
            low = self.member(char)
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self.member(self.take())
                if low[0] != "literal" or high[0] != "literal" or high[1] < low[1]:
                    raise Unsupported("bad character range")
                members.append(("range", (low[1], high[1])))
            else:
                members.append(low)
        return ("in", (negate, tuple(members)))

    def member(self, char: str) -> Item:
        if char != "\\":
            return ("literal", ord(char))
        escaped = self.take()
        if escaped in CATEGORIES:
            return ("category", CATEGORIES[escaped])
        if escaped == "b":
            return ("literal", 8)  # a backspace inside a class
        return ("literal", self.code(escaped))

    def group(self) -> Item:
        if self.peek() != "?":
            self.groups += 1
            return self.group_body(self.groups, 0, 0)
        self.pos += 1
        char = self.take()
        if char == ":":
            return self.group_body(None, 0, 0)
        if char == "P" and self.peek() == "<":
            end = self.text.find(">", self.pos)
            name = self.text[self.pos + 1 : end] if end > 0 else ""
            if not name.isidentifier():
                raise Unsupported("bad group name")
            self.pos = end + 1
            self.groups += 1
            return self.group_body(self.groups, 0, 0)
        if char in "=!":
            return self.look(1, char == "!")
        if char == "<" and self.peek() in ("=", "!"):
            return self.look(-1, self.take() == "!")
        self.pos -= 1
        return self.scoped_flags()

    def scoped_flags(self) -> Item:
        """``(?aims-ims:...)``."""
        match = re.compile(r"([aimsu]*)(?:-([ims]+))?:").match(self.text, self.pos)
        if match is None or not (match.group(1) or match.group(2)):
            raise Unsupported("group kind")  # (?>, (?(, (?P=, (?x, global flags later
        add = remove = 0
        for letter in match.group(1):
            add |= FLAG_LETTERS.get(letter, 0)
        for letter in match.group(2) or "":
            remove |= FLAG_LETTERS[letter]
        if add & remove:
            raise Unsupported("a flag both turned on and off")
        self.pos = match.end()
        return self.group_body(None, add, remove)

    def group_body(self, index: int | None, add: int, remove: int) -> Item:
        sub = self.alternatives()
        if self.take() != ")":  # pragma: no cover - alternatives() stops only at ")"
            raise Unsupported("missing )")
        return ("group", (index, add, remove, sub))

    def look(self, direction: int, negative: bool) -> Item:
        sub = self.alternatives()
        if self.take() != ")":  # pragma: no cover
            raise Unsupported("missing )")
        return ("assert", (direction, negative, sub))
