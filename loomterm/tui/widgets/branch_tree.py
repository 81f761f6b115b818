"""The branch pane: the loom's tree with short previews.

Runs of single children (a generation, the halves of a truncated node, a long story) are
folded into one row, its first words … its last words and how many nodes it holds, so
depth in the pane is the number of branch points, not of nodes (as socketteer's loom and
Tapestry Loom fold them). Right unfolds a run into one row per node, left folds it back.
A bookmarked, rated or archived node is never folded away: the run is split there and
the node heads the next row. Rows on the current path are highlighted, branch points show
how many branches they hold, bookmarks a star, rated branches a tick (good) or a cross
(bad); archived (hidden) branches are left out unless asked for, and a ``row_filter``
(the rating filter) may leave out more.

The keyboard cursor (the pane focused) is drawn in reverse video with a marker glyph
(:data:`CURSOR_MARK`) in place of its connector, so it stays visible where colours
degrade away (16 or 256 colours, ``NO_COLOR``).

Hoisted (``tui.controllers.hoist``), the pane shows the hoisted node's subtree, the node
itself as its top row.

The rows themselves (folding, splitting, filtering) are laid out without Textual in
``tui.branch_rows``; this widget draws them and answers keys and clicks.

A Line API widget: a session with a thousand branch points a hundred deep costs what
its visible rows cost. (Textual's ``Tree`` draws every ancestor's guide on every row,
which grows with depth.) Indentation stops growing past :data:`MAX_INDENT` levels; deeper
rows show their depth instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from loomterm.tree import GOOD, Node, Origin
from loomterm.tui.branch_labels import fit_run, preview
from loomterm.tui.branch_rows import (
    Chain,
    Row,
    RowFilter,
    chain_rating,
    is_hidden,
    is_unread,
    lay_out,
)
from loomterm.tui.widgets.widget_message import WidgetMessage

MAX_INDENT = 12
CURSOR_MARK = "\u276f"  # ❯: the keyboard cursor's row, in place of its connector's gap
UNREAD_MARK = "\u2022 "  # •: a branch the model wrote that the writer has not been to
CONTINUED = "\u2506 "  # ┆: a row that goes on from the row above (no branch point between)


class BranchTree(ScrollView, can_focus=True):
    """The tree of branches. Enter or a click on a row moves the document there."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False, id="tree_up"),
        Binding("down", "cursor(1)", "Down", show=False, id="tree_down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="tree_page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="tree_page_down"),
        Binding("home", "jump(0)", "First", show=False, id="tree_first"),
        Binding("end", "jump(-1)", "Last", show=False, id="tree_last"),
        Binding("enter", "select", "Go there", show=False, id="tree_select"),
        Binding("space", "toggle", "Fold", show=False, id="tree_fold"),
        Binding("right", "unfold", "Unfold", show=False, id="tree_unfold"),
        Binding("left", "fold", "Fold", show=False, id="tree_fold_back"),
        Binding("escape", "back_to_text", "Back to text", show=False, id="tree_back"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "branch-tree--path",
        "branch-tree--current",
        "branch-tree--cursor",
        "branch-tree--model",
        "branch-tree--guide",
        "branch-tree--count",
        "branch-tree--bookmark",
        "branch-tree--hidden",
        "branch-tree--good",
        "branch-tree--bad",
        "branch-tree--unread",
    }
    """
    | Class | Description |
    | :- | :- |
    | `branch-tree--path` | Rows on the current path. |
    | `branch-tree--current` | The row the document is at. |
    | `branch-tree--cursor` | The keyboard cursor (when focused). |
    | `branch-tree--model` | Rows the model wrote. |
    | `branch-tree--guide` | Indentation guides and depth marks. |
    | `branch-tree--count` | Branch counts at branch points. |
    | `branch-tree--bookmark` | Bookmark stars. |
    | `branch-tree--hidden` | Archived rows (when shown). |
    | `branch-tree--good` | The mark of a branch rated good. |
    | `branch-tree--bad` | The mark of a branch rated bad. |
    | `branch-tree--unread` | The dot of a model branch not visited yet. |
    """

    DEFAULT_CSS = """
    BranchTree {
        background: $surface;
        color: $text;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-gutter: stable;
        scrollbar-size-vertical: 1;
        & > .branch-tree--path { color: $loom-path; text-style: bold; }
        & > .branch-tree--current { text-style: bold reverse; }
        & > .branch-tree--cursor { background: $block-cursor-blurred-background; }
        &:focus > .branch-tree--cursor {
            /* Colours degrade away (16 or 256 colours, NO_COLOR); reverse video does not.
               The row's own colours, swapped: as readable as the row itself. */
            text-style: reverse bold;
        }
        & > .branch-tree--model { color: $loom-model; }
        & > .branch-tree--guide { color: $loom-guide; }
        & > .branch-tree--count { color: $loom-muted; }
        & > .branch-tree--bookmark { color: $loom-bookmark; }
        & > .branch-tree--hidden { color: $loom-muted; text-style: italic; }
        & > .branch-tree--good { color: $success; text-style: bold; }
        & > .branch-tree--bad { color: $error; text-style: bold; }
        & > .branch-tree--unread { color: $loom-model; text-style: bold; }
    }
    """

    @dataclass
    class Selected(WidgetMessage["BranchTree"]):
        """A row was chosen (enter or click): move the document to ``chain.last``."""

        chain: Chain

    def __init__(self, text_of: Callable[[Node], str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text_of = text_of
        self.show_hidden = False
        # Given the root, a test of which children to show besides the archive's
        # (the rating filter, ``tui.controllers.ratings``); None shows every one.
        self.row_filter: Callable[[Node], RowFilter] | None = None
        self._why_shown: Callable[[Node], str] | None = None
        self.rows: list[Row] = []
        self.entries: dict[int, int] = {}  # node id -> row index
        self.path_ids: set[int] = set()
        self.current_row = -1
        self.cursor_row = 0
        self._collapsed: set[int] = set()  # first-node ids of folded rows
        self._unfolded: set[int] = set()  # first-node ids of runs shown a node a row
        self._cache: LRUCache[int, tuple[tuple, Strip]] = LRUCache(256)
        self._version = 0
        self._root: Node | None = None
        self._base: Style | None = None
        # Several models: the colour of the model that wrote a row (None: the usual
        # model colour), from ``tui.controllers.models``.
        self.writer_colour: Callable[[Node], str | None] | None = None

    # -- building ------------------------------------------------------------------
    def rebuild(self, root: Node) -> None:
        """Lay out every row from the loom's tree."""
        self._root = root
        show_hidden = self.show_hidden
        keep = self.row_filter(root) if self.row_filter is not None else None
        self._why_shown = keep.why_shown if keep is not None else None
        rows, entries = lay_out(root, show_hidden, keep, self._collapsed, self._unfolded)
        self.rows = rows
        self.entries = entries
        self.cursor_row = min(self.cursor_row, len(rows) - 1)
        self._version += 1
        self._cache.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, len(rows))
        self.refresh()

    def text_grew(self) -> None:
        """Nodes in the pane got tokens (a generation streams): draw the visible rows
        again, so every label follows its text (unchanged rows come from the cache)."""
        if self.display:
            self.refresh()

    def set_path(self, path: list[Node], current: Node) -> None:
        """Highlight ``path`` and put the cursor on ``current``'s row. Only rows whose
        highlight changed are drawn again."""
        new_ids = {node.id for node in path}
        changed = {self.entries.get(i, -1) for i in new_ids ^ self.path_ids}
        changed |= {self.current_row, self.cursor_row}
        self.path_ids = new_ids
        row = self.entries.get(current.id, -1)
        self.current_row = row
        top = round(self.scroll_y)
        if row >= 0:
            self.cursor_row = row
            self._scroll_to_row(row)
        changed |= {row}
        height = self.scrollable_content_region.height
        if round(self.scroll_y) != top:
            self.refresh()
            return
        for index in changed:
            if top <= index < top + height:
                self.refresh_line(index)

    # -- keys and mouse --------------------------------------------------------------
    def _scroll_to_row(self, row: int) -> None:
        height = max(1, self.scrollable_content_region.height)
        top = round(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height // 2, animate=False)

    def move_cursor(self, row: int) -> None:
        if not self.rows:
            return
        previous = self.cursor_row
        top = round(self.scroll_y)
        self.cursor_row = max(0, min(row, len(self.rows) - 1))
        self._scroll_to_row(self.cursor_row)
        if round(self.scroll_y) != top:
            self.refresh()
        else:
            self.refresh_line(previous)
            self.refresh_line(self.cursor_row)

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step * max(1, self.scrollable_content_region.height - 1))

    def action_jump(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else len(self.rows) - 1)

    def action_select(self) -> None:
        if 0 <= self.cursor_row < len(self.rows):
            self.post_message(self.Selected(self, self.rows[self.cursor_row].chain))

    def action_toggle(self) -> None:
        if not 0 <= self.cursor_row < len(self.rows) or self._root is None:
            return
        row = self.rows[self.cursor_row]
        if not row.kids:
            return
        key = row.chain.first.id
        self._collapsed.symmetric_difference_update({key})
        self.rebuild(self._root)

    def action_unfold(self) -> None:
        """Right: a folded run shows a row per node; a folded branch point opens."""
        if not 0 <= self.cursor_row < len(self.rows) or self._root is None:
            return
        row = self.rows[self.cursor_row]
        if row.count > 1:
            self._unfolded.add(row.chain.first.id)
        elif row.collapsed:
            self._collapsed.discard(row.chain.first.id)
        else:
            return
        self.rebuild(self._root)

    def action_fold(self) -> None:
        """Left: the run the cursor is in folds back into one row (the cursor on it)."""
        if not 0 <= self.cursor_row < len(self.rows) or self._root is None:
            return
        key = self.rows[self.cursor_row].fold_key
        if key < 0:
            return
        self._unfolded.discard(key)
        self.rebuild(self._root)
        self.move_cursor(self.entries.get(key, self.cursor_row))

    async def action_back_to_text(self) -> None:
        await self.app.run_action("focus_document")

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        row = round(self.scroll_y) + offset.y
        if 0 <= row < len(self.rows):
            self.move_cursor(row)
            self.action_select()

    # -- drawing -------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
        self._base = None

    def _component(self, name: str) -> Style:
        return self.get_component_rich_style(f"branch-tree--{name}", partial=True)

    def render_line(self, y: int) -> Strip:
        index = round(self.scroll_y) + y
        width = self.scrollable_content_region.width
        if self._base is None:
            self._base = self.rich_style
        base = self._base
        if not 0 <= index < len(self.rows):
            return Strip.blank(width, base)
        row = self.rows[index]
        on_path = row.chain.first.id in self.path_ids
        key = (
            self._version,
            on_path,
            index == self.current_row,
            index == self.cursor_row,
            self.has_focus,
            row.count,
            width,
            bool(row.chain.first.meta.get("bookmark") or row.chain.last.meta.get("bookmark")),
            row.chain.first.approx,
            len(row.chain.last.tokens),
            chain_rating(row.chain),
            is_unread(row.chain.first) or is_unread(row.chain.last),
            self.writer_colour(row.chain.first) if self.writer_colour is not None else None,
        )
        cached = self._cache.get(index)
        if cached is not None and cached[0] == key:
            return cached[1]
        segments = self._segments(row, index, on_path, base, width)
        strip = Strip(segments).crop_extend(0, width, base)
        if index == self.cursor_row:
            strip = strip.apply_style(self._component("cursor"))
        self._cache[index] = (key, strip)
        return strip

    def _segments(
        self, row: Row, index: int, on_path: bool, base: Style, width: int
    ) -> list[Segment]:
        """A row's segments: its indent and connector, its marks, then its text."""
        cursor = index == self.cursor_row and self.has_focus
        if row.depth == 0:  # the top: the root, or the hoisted node
            return self._top_segments(row, index, cursor, base)
        segments = self._indent_segments(row, cursor, base)
        segments += self._mark_segments(row.chain, base)
        return self._text_segments(row, index, on_path, base, width, segments)

    def _top_segments(self, row: Row, index: int, cursor: bool, base: Style) -> list[Segment]:
        """The top row: the start of the tree, or the hoisted node."""
        label = base + (self._component("current") if index == self.current_row else Style())
        mark = CURSOR_MARK if cursor else chr(0x2302)
        if row.chain.first.parent is None:
            return [Segment(f"{mark} start", label)]
        text = preview(row, self.text_of) or "\u2205"
        return [
            Segment(f"{mark} hoisted: ", label + self._component("count")),
            Segment(text, label),
        ]

    def _indent_segments(self, row: Row, cursor: bool, base: Style) -> list[Segment]:
        """The indent (or the depth, past :data:`MAX_INDENT`), the connector and the
        fold arrow of a branch point."""
        guide = base + self._component("guide")
        depth = row.depth
        segments: list[Segment] = []
        if depth > MAX_INDENT:
            mark = f"{depth}\u203a"
            segments.append(Segment(" " * max(0, MAX_INDENT * 2 - len(mark)) + mark, guide))
        else:
            segments.append(Segment("  " * (depth - 1), guide))
        connector = CONTINUED if row.continued else "\u2514 " if row.last else "\u251c "
        if cursor:  # seen without colours: a glyph, not only a background
            connector = connector[0] + CURSOR_MARK
        # On the cursor's row the glyphs take the row's own colours (reversed there), as
        # readable as its text; a guide's dim colour reversed would not be.
        marks = base if cursor else guide
        segments.append(Segment(connector, marks))
        if row.kids:
            segments.append(Segment("\u25b6 " if row.collapsed else "\u25bc ", marks))
        return segments

    def _mark_segments(self, chain: Chain, base: Style) -> list[Segment]:
        """The row's marks: bookmark, unread, rating, and why the filter shows it."""
        segments: list[Segment] = []
        if chain.first.meta.get("bookmark") or chain.last.meta.get("bookmark"):
            segments.append(Segment("\u2605 ", base + self._component("bookmark")))
        if is_unread(chain.first) or is_unread(chain.last):  # a new branch not read yet
            segments.append(Segment(UNREAD_MARK, base + self._component("unread")))
        rating = chain_rating(chain)
        if rating is not None:
            good = rating == GOOD
            mark = Segment(
                "\u2713 " if good else "\u2717 ", base + self._component("good" if good else "bad")
            )
            segments.append(mark)
        why = self._why_shown(chain.first) if self._why_shown is not None else ""
        if why:  # a row the filter would leave out, shown all the same: say why
            segments.append(Segment(f"({why}) ", base + self._component("count")))
        return segments

    def _text_segments(
        self,
        row: Row,
        index: int,
        on_path: bool,
        base: Style,
        width: int,
        segments: list[Segment],
    ) -> list[Segment]:
        """``segments`` (what comes before the text) and the row's text in its style:
        a folded run fitted to the width, so that its end and its counts stay in sight."""
        chain = row.chain
        style = base
        if chain.first.origin is Origin.MODEL:
            style += self._component("model")
        if on_path:
            style += self._component("path")
        if index == self.current_row:
            style += self._component("current")
        if is_hidden(chain.first):
            style += self._component("hidden")
        colour = self.writer_colour(chain.first) if self.writer_colour is not None else None
        if colour is not None:  # several models: a swatch in the writer's colour
            segments.append(Segment("\u25a0 ", Style(color=colour)))
            style += Style(color=colour)
        if chain.first.approx:
            segments.append(Segment("~", style))
        text = preview(row, self.text_of) or "\u2205"
        count = base + self._component("count")
        if row.count == 1:
            segments.append(Segment(text, style))
            if row.kids > 1:
                segments.append(Segment(f" [{row.kids}]", count))
            return segments
        # A folded run: first words … last words (N nodes) [branches].
        suffix = [Segment(f" ({row.count} nodes)", count)]
        if row.kids > 1:
            suffix.append(Segment(f" [{row.kids}]", count))
        room = width - Segment.get_line_length(segments) - Segment.get_line_length(suffix)
        segments.append(Segment(fit_run(text, row.tail, max(room, 3)), style))
        return segments + suffix
