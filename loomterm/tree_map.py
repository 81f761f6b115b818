"""The tree map's layout: the whole tree drawn compactly, a cell pair per branch.

Headless (the editor draws it, ``loomterm.tui.widgets.tree_map``; ``loomterm bench``
times it). Runs of single children are one *unit* (as the branch pane folds them), so
the map is as wide as the tree has branch points, not nodes. Each leaf has a row; a
unit sits on the row of its first leaf, two cells per column of depth: its glyph, then
the connector to its children (``─`` one, ``┬`` several); a later child begins a row
of its own below, reached by ``├`` or ``└`` under its parent's connector::

    ⌂┬●┬●─●
     │ └●─●
     └◆─★

Nothing is laid out ahead. A unit is named by its first node; what the map needs of it
(where its run ends, its children, its parent, its column) is found when first asked and
kept while the tree's version is the same (:meth:`MapLayout` is made anew for a new
version). Rows have no numbers: a row is named by the unit it begins with, and
:meth:`MapLayout.next_row` and :meth:`MapLayout.previous_row` step between neighbours.
So a key, and drawing the rows on screen, cost what those rows hold and the depth above
them, never the size of the tree (``touched`` counts the units walked, for the tests and
the bench): opening the map on a 21,845-node tree walks a few hundred.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loomterm.tree import GOOD, Node, rating_of

CELLS = 2  # cells per column: the unit's glyph and its connector
ROOT = "\u2302"  # ⌂: the map's top (the root, or the hoisted node)
NODE = "\u25cf"  # ●: a unit of one node
RUN = "\u25c6"  # ◆: a unit of several nodes (a folded run of single children)
BOOKMARK = "\u2605"  # ★
UNREAD = "\u25cb"  # ○: a new branch the writer has not been to
GOOD_MARK = "\u2713"  # ✓
BAD_MARK = "\u2717"  # ✗

# The kinds of a row's cells (the widget gives each its style).
GUIDE = "guide"
UNIT = "unit"


def _kept(node: Node) -> bool:
    """A node a run never folds over: bookmarked, rated or archived (its own unit, so
    its mark stays in sight; the branch pane splits runs at the same nodes)."""
    meta = node.meta
    if not meta:
        return False
    return bool(meta.get("bookmark") or meta.get("hidden")) or rating_of(node) is not None


def glyph_of(first: Node, last: Node, top: bool = False) -> str:
    """The glyph of the unit ``first``..``last``: its strongest mark (a bookmark, a new
    branch, a rating), else one node or a folded run."""
    if top:
        return ROOT
    if first.meta.get("bookmark") or last.meta.get("bookmark"):
        return BOOKMARK
    if first.meta.get("unread") or last.meta.get("unread"):
        return UNREAD
    rating = rating_of(first)
    if rating is not None:
        return GOOD_MARK if rating == GOOD else BAD_MARK
    return NODE if first is last else RUN


@dataclass(frozen=True)
class Cell:
    """One cell of a row: ``text`` of ``kind`` (:data:`GUIDE` or :data:`UNIT`); ``unit``
    is the unit it draws (a glyph), or the one a connector leads into (None for other
    guides); ``on_path``: a connector on the line to the current path's units."""

    text: str
    kind: str
    unit: Node | None
    on_path: bool = False


class MapLayout:
    """The map of the tree below ``top`` (the root, or the hoisted node), found as it
    is asked for. ``show_hidden`` False leaves archived branches out. Valid while the
    tree does not change: make a new one for the tree's next version."""

    def __init__(self, top: Node, show_hidden: bool = False) -> None:
        self.top = top
        self.show_hidden = show_hidden
        self.touched = 0  # units walked since made (or since the caller reset it)
        self._end: dict[int, Node] = {}  # unit (first node id) -> its last node
        self._kids: dict[int, list[Node]] = {}  # unit -> its children's units
        self._start: dict[int, Node] = {}  # node id -> the first node of its unit
        self._column: dict[int, int] = {}  # unit -> its column (units above it)
        self._index: dict[int, int] = {}  # unit -> its place among its siblings

    # -- units ---------------------------------------------------------------------
    def _children(self, node: Node) -> list[Node]:
        if self.show_hidden:
            return node.children
        return [child for child in node.children if not child.meta.get("hidden")]

    def end(self, unit: Node) -> Node:
        """The last node of ``unit``'s run (follow single children, stopping before a
        bookmarked, rated or archived one; the top is a unit of its own)."""
        found = self._end.get(unit.id)
        if found is None:
            found = unit
            if unit is not self.top:
                below = self._children(found)
                while len(below) == 1 and not _kept(below[0]):
                    self.touched += 1
                    found = below[0]
                    self._start[found.id] = unit
                    below = self._children(found)
            self._end[unit.id] = found
        return found

    def kids(self, unit: Node) -> list[Node]:
        """The units below ``unit`` (its last node's visible children)."""
        found = self._kids.get(unit.id)
        if found is None:
            self.touched += 1
            found = self._children(self.end(unit))
            self._kids[unit.id] = found
            for i, kid in enumerate(found):
                self._index[kid.id] = i
                self._start[kid.id] = kid
        return found

    def start(self, node: Node) -> Node:
        """The unit ``node`` belongs to (its first node)."""
        passed: list[Node] = []
        at = node
        while True:
            found = self._start.get(at.id)
            if found is not None:
                break
            parent = at.parent
            if at is self.top or parent is None or _kept(at) or parent is self.top:
                found = at
                break
            self.touched += 1
            if len(self._children(parent)) != 1:
                found = at
                break
            passed.append(at)
            at = parent
        self._start[at.id] = found
        for item in passed:
            self._start[item.id] = found
        return found

    def parent(self, unit: Node) -> Node | None:
        """The unit above (None for the top)."""
        if unit is self.top or unit.parent is None:
            return None
        return self.start(unit.parent)

    def index(self, unit: Node) -> int:
        """``unit``'s place among its siblings (0 for the top)."""
        found = self._index.get(unit.id)
        if found is None:
            parent = self.parent(unit)
            if parent is None:
                return 0
            self.kids(parent)
            found = self._index.get(unit.id, 0)
        return found

    def column(self, unit: Node) -> int:
        """How many units are above ``unit`` (its column on the map)."""
        passed: list[Node] = []
        at: Node | None = unit
        base = 0
        while at is not None:
            found = self._column.get(at.id)
            if found is not None:
                base = found
                break
            passed.append(at)
            self.touched += 1
            at = self.parent(at)
        else:
            base = -1
        for i, item in enumerate(reversed(passed)):
            self._column[item.id] = base + 1 + i
        return self._column[unit.id]

    def holds(self, node: Node) -> bool:
        """``node`` is on the map: at or below the top (and not archived away)."""
        at: Node | None = node
        while at is not None:
            if at is self.top:
                return True
            if not self.show_hidden and at.meta.get("hidden"):
                return False
            at = at.parent
        return False

    def unit_at(self, node: Node) -> Node:
        """The unit holding ``node``, or the nearest one above it on the map (the top's
        when ``node`` is outside it)."""
        if not self.top.is_ancestor_of(node):
            return self.top
        at: Node | None = node
        while at is not None and not self.holds(at):
            at = at.parent  # archived and left out: its nearest shown ancestor
        return self.start(at) if at is not None else self.top

    def path_units(self, node: Node | None) -> dict[int, Node | None]:
        """The units on the path to ``node`` that lie on the map: unit id -> the next
        unit on the path (None at the path's end). Costs the path's length."""
        out: dict[int, Node | None] = {}
        if node is None or not self.holds(node):
            return out
        below: Node | None = None
        unit: Node | None = self.start(node)
        while unit is not None:
            out[unit.id] = below
            below = unit
            unit = self.parent(unit)
        return out

    # -- rows ----------------------------------------------------------------------
    def row_of(self, unit: Node) -> Node:
        """The unit ``unit``'s row begins with (up while it is a first child)."""
        while unit is not self.top and self.index(unit) == 0:
            self.touched += 1
            parent = self.parent(unit)
            if parent is None:
                break
            unit = parent
        return unit

    def last_row(self, unit: Node) -> Node:
        """The row of the last leaf below ``unit``."""
        while True:
            kids = self.kids(unit)
            if not kids:
                return self.row_of(unit)
            unit = kids[-1]

    def next_row(self, row: Node) -> Node | None:
        """The row after ``row`` (a row's first unit), or None at the end."""
        at = row
        while True:
            kids = self.kids(at)
            if not kids:
                break
            at = kids[0]
        while at is not self.top:
            parent = self.parent(at)
            if parent is None:
                break
            siblings = self.kids(parent)
            place = self.index(at) + 1
            if place < len(siblings):
                return siblings[place]
            at = parent
        return None

    def previous_row(self, row: Node) -> Node | None:
        """The row before ``row``, or None at the top."""
        parent = self.parent(row)
        if parent is None:
            return None
        place = self.index(row)
        if place == 0:
            return self.row_of(parent)
        return self.last_row(self.kids(parent)[place - 1])

    def rows_from(self, row: Node, count: int) -> list[Node]:
        """Up to ``count`` rows from ``row`` on."""
        out = [row]
        while len(out) < count:
            following = self.next_row(out[-1])
            if following is None:
                break
            out.append(following)
        return out

    def step_rows(self, row: Node, count: int) -> Node:
        """The row ``count`` rows after (or, negative, before) ``row``, as far as the map
        goes."""
        step = self.next_row if count > 0 else self.previous_row
        for _ in range(abs(count)):
            found = step(row)
            if found is None:
                break
            row = found
        return row

    def screen(
        self, cursor: Node, shown: list[Node], height: int, centre: bool = False
    ) -> list[Node]:
        """The rows to show ``height`` high so that ``cursor``'s row is among them:
        ``shown`` (the rows on screen now) kept if it is there, scrolled by one row if
        it is just past either end, else with it in the middle (``centre``: always)."""
        row = self.row_of(cursor)
        if not shown or centre:
            first = self.step_rows(row, -(height // 2))
        elif row in shown:
            first = shown[0]
        elif self.next_row(shown[-1]) is row:
            first = self.step_rows(row, -(height - 1))
        elif self.previous_row(shown[0]) is row:
            first = row
        else:
            first = self.step_rows(row, -(height // 2))
        return self.rows_from(first, height)

    # -- moves ---------------------------------------------------------------------
    def up(self, unit: Node) -> Node:
        """The parent unit (the top stays)."""
        return self.parent(unit) or unit

    def down(self, unit: Node, path: dict[int, Node | None] | None = None) -> Node:
        """A child: the one the path leads along, else the first."""
        kids = self.kids(unit)
        if not kids:
            return unit
        toward = path.get(unit.id) if path else None
        return toward if toward is not None and toward in kids else kids[0]

    def sibling(self, unit: Node, step: int) -> Node:
        """The next (``step`` 1) or previous (-1) sibling; without one there, the
        nearest ancestor's (so the key moves down or up the map)."""
        at = unit
        while True:
            parent = self.parent(at)
            if parent is None:
                return unit
            siblings = self.kids(parent)
            other = self.index(at) + step
            if 0 <= other < len(siblings):
                return siblings[other]
            at = parent

    # -- drawing -------------------------------------------------------------------
    def row(
        self,
        start: Node,
        path: dict[int, Node | None] | None = None,
        glyph: Callable[[Node, Node, bool], str] = glyph_of,
        limit: int | None = None,
    ) -> list[Cell]:
        """The cells of the row that begins with ``start``, from the map's first column:
        the guides coming down from the units above ``start`` (a blank and a guide per
        column), then its units left to right, each glyph with its connector. ``path``
        (from :meth:`path_units`) lights the connectors that lead to the current
        path's units; ``limit`` stops after that many cells."""
        path = path or {}
        guides: list[Cell] = []
        at = start
        while True:
            parent = self.parent(at)
            if parent is None:
                break
            self.touched += 1
            more = self.index(at) < len(self.kids(parent)) - 1
            toward = path.get(parent.id)
            if at is start:
                guides.append(Cell("\u251c" if more else "\u2514", GUIDE, at, toward is at))
            else:
                lit = more and toward is not None and self.index(toward) > self.index(at)
                guides.append(Cell("\u2502" if more else " ", GUIDE, None, lit))
            at = parent
        cells: list[Cell] = []
        for guide in reversed(guides):
            cells.append(Cell(" ", GUIDE, None))
            cells.append(guide)
        unit = start
        while limit is None or len(cells) < limit:
            self.touched += 1
            kids = self.kids(unit)
            cells.append(Cell(glyph(unit, self.end(unit), unit is self.top), UNIT, unit))
            if not kids:
                break
            link = "\u252c" if len(kids) > 1 else "\u2500"
            cells.append(Cell(link, GUIDE, kids[0], path.get(unit.id) is not None))
            unit = kids[0]
        return cells


__all__ = ["CELLS", "Cell", "MapLayout", "glyph_of"]
