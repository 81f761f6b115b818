"""How far a regular expression can look: what lets a search of a tree resume where
the text above a node has already been searched.

A search over every branch (``loomterm.search``) matches each node together with the
text above it. To know where, in the text above, matching must start again, it needs
to know how far one attempt of the pattern may read from where the attempt starts:

- a *bounded* pattern (no ``*``, ``+`` or ``{n,}``) reads at most ``width + ahead + 1``
  characters: its widest match, its look-aheads, the character that ends it;
- an *unbounded* one may read any number of characters, but its unbounded repeats can
  only consume certain characters (``\\w+`` no space, ``.*`` no newline). The characters
  none of them can consume are *barriers*: an attempt reads past at most
  ``width + ahead`` of them (those the pattern's bounded parts consume), so it never
  reads beyond the ``width + ahead + 1``-th barrier after its start;
- a pattern whose repeats can consume every character (``(?s).*``, ``[\\s\\S]+``) has no
  barrier: an attempt may read to the end of the text, and the search must start again
  from the top of the path for every node.

The analysis reads the parse tree of ``loomterm.search.syntax`` (Python's syntax) and
errs on the safe side: anything it does not know makes the pattern barrier-less, which is
slower but finds the same matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from loomterm.search import syntax

# Characters tried as barriers; those a negated class names are tried too.
CANDIDATES = " \n\t\r.,;:!?\"'()[]{}<>-_/\\|*#=+&%$@0123456789"


@dataclass(frozen=True)
class Reach:
    """How far one attempt of a pattern may read (see the module docstring).

    Attributes:
        width: Characters its bounded parts consume at most (unbounded repeats: 0).
        ahead: Characters its look-aheads consume at most, on top of ``width``.
        behind: Characters its look-behinds (and ``^``, ``\\b``) read before a position.
        bounded: True when it has no unbounded repeat.
        barriers: A class matching one barrier character, or None (bounded: every
            character is one; unbounded and None: there is no barrier).
    """

    width: int
    ahead: int
    behind: int
    bounded: bool
    barriers: re.Pattern[str] | None

    @property
    def count(self) -> int:
        """Barriers an attempt may read past, plus one: the one it cannot."""
        return self.width + self.ahead + 1

    @property
    def endless(self) -> bool:
        """An attempt may read to the end of the text."""
        return not self.bounded and self.barriers is None


@dataclass
class _Walk:
    flags: int
    atoms: list[tuple[tuple, int]] = field(default_factory=list)  # in unbounded repeats
    behind: int = 0
    unknown: bool = False  # met something not understood: barrier-less
    barriers: str = ""  # second pass: count only the atoms that can consume one of these
    record: bool = True  # first pass: note the atoms of unbounded repeats

    def weigh(self, atom: tuple, flags: int) -> int:
        """1 when a bounded atom counts towards the width: always on the first pass;
        on the second, only when it can consume a barrier."""
        if not self.barriers:
            return 1
        test = _atom_pattern(atom, flags)
        return int(test is None or any(test.fullmatch(c) for c in self.barriers))


def analyse(pattern: str, flags: int) -> Reach:
    """The :class:`Reach` of ``pattern`` compiled with ``flags``; a pattern this cannot
    read is barrier-less and unbounded."""
    try:
        tree, global_flags = syntax.parse(pattern)
        walk = _Walk(flags | global_flags)
        width, ahead = _width(tree, walk, walk.flags, False)
    except Exception:  # noqa: BLE001 - any surprise: the safe, slow answer
        return Reach(0, 0, 0, False, None)
    behind = walk.behind + 1  # ``\b`` and ``^`` read the character before
    if walk.unknown:
        return Reach(width, ahead, behind, False, None)
    if not walk.atoms:
        return Reach(width, ahead, behind, True, None)
    chars = _barriers(walk)
    if not chars:
        return Reach(width, ahead, behind, False, None)
    # Bounded parts that cannot consume a barrier (``ly`` in ``\w+ly``) pass none.
    walk.barriers, walk.record = chars, False
    try:
        width, ahead = _width(tree, walk, walk.flags, False)
    except Exception:  # noqa: BLE001 - keep the first, larger count
        pass
    barriers = re.compile("[" + "".join(re.escape(c) for c in chars) + "]")
    return Reach(width, ahead, behind, False, barriers)


def _width(items, walk: _Walk, flags: int, endless: bool) -> tuple[int, int]:
    """(chars consumed at most outside unbounded repeats, look-ahead chars at most) of a
    sequence of parse items; records the atoms of unbounded repeats in ``walk``."""
    total = ahead = 0
    for kind, value in items:
        if kind in ("literal", "not_literal", "any", "in"):
            if endless:
                if walk.record:
                    walk.atoms.append(((kind, value), flags))
            else:
                total += walk.weigh((kind, value), flags)
        elif kind == "at":
            continue
        elif kind == "branch":
            widths = [_width(alt, walk, flags, endless) for alt in value]
            total += max(w for w, _ in widths)
            ahead += max(a for _, a in widths)
        elif kind == "group":
            _group, add, remove, sub = value
            w, a = _width(sub, walk, (flags | add) & ~remove, endless)
            total, ahead = total + w, ahead + a
        elif kind == "repeat":
            _low, high, _lazy, sub = value
            unbounded = high is None
            w, a = _width(sub, walk, flags, endless or unbounded)
            if not unbounded:
                total, ahead = total + w * high, ahead + a * high
        elif kind == "assert":
            direction, _negative, sub = value
            w, a = _width(sub, walk, flags, endless)
            if direction < 0:
                walk.behind = max(walk.behind, w + a + 1)
            else:
                ahead += w + a
        else:
            walk.unknown = True
    return total, ahead


def _barriers(walk: _Walk) -> str:
    """The candidate characters no atom of an unbounded repeat consumes ("": none)."""
    candidates = set(CANDIDATES)
    for (kind, value), _ in walk.atoms:  # a negated character names a likely barrier
        if kind == "not_literal":
            candidates.add(chr(value))
        elif kind == "in" and value[0]:
            candidates.update(chr(v) for k, v in value[1] if k == "literal")
    tests = [_atom_pattern(atom, flags) for atom, flags in walk.atoms]
    if any(test is None for test in tests):
        return ""  # an atom not understood consumes anything
    return "".join(sorted(c for c in candidates if not any(t.fullmatch(c) for t in tests)))


# the flags that change what one character item matches
ATOM_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII


def _atom_pattern(atom: tuple, flags: int) -> re.Pattern[str] | None:
    """One character item (a character, a class) written back out and compiled on its
    own, to try characters against it with the flags it was read under (case folding
    included)."""
    try:
        return re.compile(syntax.atom_source(atom), flags & ATOM_FLAGS)
    except Exception:  # noqa: BLE001 - not understood: the caller assumes the worst
        return None
