"""A user's search pattern, matched by an engine that cannot freeze the editor.

A regular expression typed into the search dialog is read as Python reads it (its
syntax, its Unicode ``\\w``, ``\\d`` and ``\\s``, ``(?i)``, ``{,n}``) and run by one of:

- **RE2** (``google-re2``), in time linear in the text whatever the pattern: the
  pattern's parse tree (``loomterm.search.syntax``, Python's syntax) is written out again in RE2's syntax, with Python's
  Unicode classes spelled out (RE2's own ``\\w`` is ASCII), so it matches what Python
  would. ``(a|a)+$`` over a long run of ``a`` takes milliseconds, not minutes;
- the **regex** module (a backtracking engine, Python's syntax) for what RE2 cannot
  express: look-arounds, back-references, ``\\b`` over Unicode, atomic groups,
  possessive repeats, repeats over 1000, patterns that can match nothing. It lets go of the GIL while it matches and
  stops at a deadline, so a pathological pattern ends in a one-line error
  (:class:`PatternTooSlow`) and the editor's keys answer meanwhile;
- Python's ``re`` for plain text (an escaped literal: linear).

Matching is over ``str`` and gives character offsets, as Python's ``re`` does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loomterm.errors import InputError
from loomterm.search import syntax

try:
    import re2
except ImportError:  # pragma: no cover - the dependency missing: the slower engine
    re2 = None

RE2_MAX_REPEAT = 1000  # RE2 refuses a counted repeat above this
# Python's str.isspace() (``\s`` over Unicode), checked against it in the tests.
UNICODE_SPACE = (
    r"\t\n\x0b\x0c\r\x1c-\x1f\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
    r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
)
UNICODE_WORD = r"\p{L}\p{N}_"  # Python's \w: str.isalnum() or "_"
UNICODE_DIGIT = r"\p{Nd}"  # Python's \d: str.isdecimal()
ASCII_CLASSES = {"DIGIT": r"0-9", "WORD": r"0-9A-Za-z_", "SPACE": r"\t\n\x0b\x0c\r\x20"}
UNICODE_CLASSES = {"DIGIT": UNICODE_DIGIT, "WORD": UNICODE_WORD, "SPACE": UNICODE_SPACE}


class PatternTooSlow(InputError):
    """A search went past its deadline (a pattern only the backtracking engine runs,
    or a tree too large)."""


class SearchStopped(Exception):
    """The search was cancelled (a newer one replaced it, or the dialog closed)."""


@dataclass(frozen=True)
class Matcher:
    """A compiled query.

    Attributes:
        source: The pattern as Python reads it (for ``loomterm.search.reach``).
        flags: Python's flags of the pattern, its inline ones included.
        engine: ``"re2"``, ``"regex"`` (backtracking, with a deadline) or ``"re"``
            (plain text).
    """

    source: str
    flags: int
    engine: str
    compiled: Any

    def spans(
        self, text: str, pos: int, deadline: float | None = None
    ) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of each match in ``text`` from ``pos``, as ``finditer``
        finds them. The backtracking engine raises :class:`PatternTooSlow` past
        ``deadline`` (a ``time.monotonic()`` value)."""
        if self.engine == "re":
            for found in self.compiled.finditer(text, pos):
                yield found.span()
            return
        if self.engine == "re2":
            try:
                matches = self.compiled.finditer(text, pos)
                first = next(matches, None)  # RE2 reads UTF-8: the text is encoded here
            except UnicodeEncodeError:  # a lone surrogate: the other engine reads str
                yield from self._backtrack(
                    _backtracking(self.source, self.flags), text, pos, deadline
                )
                return
            if first is not None:
                yield first.span()
                for found in matches:
                    yield found.span()
            return
        yield from self._backtrack(self.compiled, text, pos, deadline)

    @staticmethod
    def _backtrack(
        compiled: Any, text: str, pos: int, deadline: float | None
    ) -> Iterator[tuple[int, int]]:
        left = None if deadline is None else max(0.001, deadline - time.monotonic())
        try:
            for found in compiled.finditer(text, pos, timeout=left):
                yield found.span()
        except TimeoutError:
            raise PatternTooSlow(
                "regular expression too slow here: it backtracks (look-arounds, "
                "back-references or \\b make it one RE2 cannot run); simplify it"
            ) from None


def compile_query(text: str, regex: bool, case: bool) -> Matcher:
    """The matcher for a query (``regex``: ``text`` is a Python regular expression;
    ``^``/``$`` match at line ends; ``case`` False: case-insensitive). A bad pattern
    raises :class:`InputError` in one line, naming where it is wrong."""
    pattern = python_pattern(text, regex, case)
    if not regex:
        return Matcher(pattern.pattern, pattern.flags, "re", pattern)
    translated = to_re2(text, pattern.flags)
    if translated is not None and re2 is not None:
        try:
            return Matcher(text, pattern.flags, "re2", re2.compile(translated, _re2_options()))
        except re2.error:
            pass  # beyond RE2's limits (its program size): the backtracking engine
    return Matcher(text, pattern.flags, "regex", _backtracking(text, pattern.flags))


def python_pattern(text: str, regex: bool, case: bool) -> re.Pattern[str]:
    """The query as Python's ``re`` reads it (compiling runs nothing: safe on any
    input); the reference the other engines match like. A bad pattern raises
    :class:`InputError` in one line."""
    flags = re.MULTILINE | (0 if case else re.IGNORECASE)
    if not regex:
        return re.compile(re.escape(text), flags)
    try:
        return re.compile(text, flags)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise InputError(f"bad regular expression: {exc.msg}{where}") from None
    except (RecursionError, OverflowError, MemoryError):
        raise InputError("bad regular expression: too deeply nested or too large") from None


def _re2_options() -> Any:
    options = re2.Options()
    options.max_mem = 64 << 20
    return options


def _backtracking(text: str, flags: int) -> Any:
    import regex as backtracking  # transformers' own dependency: always here

    keep = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE  # the same bits in both
    # re.ASCII's bit is regex's VERSION1: ``(?a)`` passed on as it is raised ValueError
    ascii_ = backtracking.ASCII if flags & re.ASCII else 0
    try:
        return backtracking.compile(text, (flags & keep) | ascii_ | backtracking.VERSION0)
    except (backtracking.error, RecursionError, OverflowError, MemoryError) as exc:
        raise InputError(f"regular expression not supported here: {exc}") from None


def to_re2(pattern: str, flags: int) -> str | None:
    """``pattern`` (Python's syntax, compiled with ``flags``) in RE2's syntax, matching
    the same text; None when RE2 cannot say it the same way."""
    if flags & (re.LOCALE | re.DEBUG | re.VERBOSE):
        return None
    try:
        tree, global_flags = syntax.parse(pattern)
        if syntax.min_width(tree) == 0:
            # It can match nothing: after an empty match Python tries a non-empty one
            # at the same place, RE2's scan moves on a character (``a*?b*`` on "a").
            return None
        return _Writer().seq(tree, flags | global_flags)
    except syntax.Unsupported:
        return None
    except Exception:  # noqa: BLE001 - anything not understood: the other engine
        return None


class _Writer:
    """Writes a parse tree (``loomterm.search.syntax``) out in RE2's syntax; raises
    :class:`syntax.Unsupported` for what RE2 cannot say the same way."""

    def seq(self, items, flags: int) -> str:
        return "".join(self.item(kind, value, flags) for kind, value in items)

    def item(self, kind: str, value, flags: int) -> str:
        fold = "(?i:{})" if flags & re.IGNORECASE else "{}"
        if kind == "literal":
            return fold.format(_char(value))
        if kind == "not_literal":
            return fold.format(f"[^{_char(value)}]")
        if kind == "any":
            return "(?s:.)" if flags & re.DOTALL else "(?-s:.)"
        if kind == "in":
            return fold.format(self.in_set(value, flags))
        if kind == "at":
            return self.at(value, flags)
        if kind == "branch":
            return "(?:" + "|".join(self.seq(alt, flags) for alt in value) + ")"
        if kind == "group":
            _group, add, remove, sub = value
            return "(?:" + self.seq(sub, (flags | add) & ~remove) + ")"
        if kind == "repeat":
            low, high, lazy, sub = value
            if low > RE2_MAX_REPEAT or (high is not None and high > RE2_MAX_REPEAT):
                raise syntax.Unsupported("repeat over RE2's limit")
            count = f"{{{low},}}" if high is None else f"{{{low},{high}}}"
            return "(?:" + self.seq(sub, flags) + ")" + count + ("?" if lazy else "")
        raise syntax.Unsupported(kind)  # look-arounds

    def at(self, where: str, flags: int) -> str:
        if where == "BEGINNING":
            return "(?m:^)" if flags & re.MULTILINE else r"\A"
        if where == "END" and flags & re.MULTILINE:
            return "(?m:$)"  # before any "\n" or at the end, as Python's multiline $
        if where == "BEGINNING_STRING":
            return r"\A"
        if where == "END_STRING":
            return r"\z"
        if where in ("BOUNDARY", "NON_BOUNDARY") and flags & re.ASCII:
            return r"\b" if where == "BOUNDARY" else r"\B"
        raise syntax.Unsupported(
            where
        )  # Unicode \b; a single-line $ (it also matches before a final "\n")

    def in_set(self, value, flags: int) -> str:
        classes = ASCII_CLASSES if flags & re.ASCII else UNICODE_CLASSES
        negate, members = value
        parts = []
        for kind, member in members:
            if kind == "literal":
                parts.append(_char(member))
            elif kind == "range":
                parts.append(f"{_char(member[0])}-{_char(member[1])}")
            else:  # a category
                category = member
                if category.startswith("NOT_"):
                    if negate or len(members) != 1:  # a complement inside a larger class
                        raise syntax.Unsupported("a complement inside a class")
                    negate, category = True, category.removeprefix("NOT_")
                parts.append(classes[category])
        if not parts:
            raise syntax.Unsupported("an empty class")
        return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _char(code: int) -> str:
    """One character, escaped for RE2 inside or outside a class."""
    return f"\\x{{{code:x}}}"
