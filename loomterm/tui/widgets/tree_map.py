"""The tree map: the whole tree (or the hoisted branch) drawn compactly, moved through
with the keyboard, as socketteer's loom's tree map, Tapestry Loom's graph and vim's
undotree show it.

Each branch is a glyph (``loomterm.tree_map``: a folded run of single children is one);
the current path is drawn in the path colour with its connectors, the document's own
branch underlined, bookmarks as ``★``, new (unread) branches as ``○``, ratings as
``✓``/``✗``. The keyboard cursor is reversed, with ``❯`` in the connector before it (seen
without colours). Left and right (h, l) go to the parent and a child, up and down (k, j)
to the previous and next sibling; page up and down, home and end jump by screens and to
the ends, ``c`` back to the document's branch; enter goes there, escape closes.

A Line API widget over a lazy layout: nothing is laid out ahead, a row is found from its
neighbour, so a key costs what the rows on screen cost on a tree of any size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Label

from loomterm.tree import Node, Origin
from loomterm.tree_map import CELLS, GUIDE, Cell, MapLayout
from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.dialogs import DialogScreen, dialog_css, dialog_title
from loomterm.tui.widgets.widget_message import WidgetMessage

CURSOR_MARK = "\u276f"  # ❯: in the connector before the cursor's glyph
PREVIEW = 60


class TreeMap(Widget, can_focus=True):
    """The map of ``layout``, its cursor on a unit (named by its first node)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left,h", "parent", "Parent", show=False, id="map_parent"),
        Binding("right,l", "child", "Child", show=False, id="map_child"),
        Binding("up,k", "sibling(-1)", "Previous sibling", show=False, id="map_previous"),
        Binding("down,j", "sibling(1)", "Next sibling", show=False, id="map_next"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="map_page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="map_page_down"),
        Binding("home", "home", "Top", show=False, id="map_top"),
        Binding("end", "end", "Last branch", show=False, id="map_last"),
        Binding("c", "current", "Current", show=False, id="map_current"),
        Binding("enter", "select", "Go there", show=False, id="map_select"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "tree-map--guide",
        "tree-map--path",
        "tree-map--current",
        "tree-map--cursor",
        "tree-map--model",
        "tree-map--bookmark",
        "tree-map--unread",
        "tree-map--good",
        "tree-map--bad",
    }
    """
    | Class | Description |
    | :- | :- |
    | `tree-map--guide` | Connectors. |
    | `tree-map--path` | The current path's glyphs and connectors. |
    | `tree-map--current` | The document's own branch. |
    | `tree-map--cursor` | The keyboard cursor. |
    | `tree-map--model` | Branches the model wrote. |
    | `tree-map--bookmark` | Bookmarks. |
    | `tree-map--unread` | New branches not visited yet. |
    | `tree-map--good`, `tree-map--bad` | Rated branches. |
    """

    DEFAULT_CSS = """
    TreeMap {
        background: $surface;
        color: $text;
        height: 1fr;
        & > .tree-map--guide { color: $loom-guide; }
        & > .tree-map--path { color: $loom-path; text-style: bold; }
        & > .tree-map--current { text-style: bold underline; }
        & > .tree-map--cursor { text-style: reverse bold; }
        & > .tree-map--model { color: $loom-model; }
        & > .tree-map--bookmark { color: $loom-bookmark; }
        & > .tree-map--unread { color: $loom-model; text-style: bold; }
        & > .tree-map--good { color: $success; text-style: bold; }
        & > .tree-map--bad { color: $error; text-style: bold; }
    }
    """

    @dataclass
    class Moved(WidgetMessage["TreeMap"]):
        """The cursor moved to ``unit`` (its first node)."""

        unit: Node

    @dataclass
    class Selected(WidgetMessage["TreeMap"]):
        """Enter: go to ``node`` (the last node of the cursor's unit)."""

        node: Node

    def __init__(self, layout: MapLayout, current: Node | None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.map_layout = layout
        self.current = current
        self.path = layout.path_units(current)
        self.cursor = layout.unit_at(current) if current is not None else layout.top
        self.rows: list[Node] = []  # the rows on screen, top down
        self.left = 0  # the first column on screen
        self.drawn = 0  # rows drawn (render_line calls), for the tests
        self._base: Style | None = None
        self._styles: dict[str, Style] = {}

    # -- layout ----------------------------------------------------------------------
    def use(self, layout: MapLayout, current: Node | None) -> None:
        """Draw ``layout`` (the tree changed) with the cursor where it was."""
        cursor = self.cursor
        self.map_layout = layout
        self.current = current
        self.path = layout.path_units(current)
        self.cursor = layout.unit_at(cursor)
        self.rows = []
        self._place(centre=True)
        self.refresh()

    @property
    def _height(self) -> int:
        return max(1, self.content_region.height or self.size.height)

    @property
    def _columns(self) -> int:
        return max(1, (self.content_region.width or self.size.width) // CELLS)

    def _place(self, centre: bool = False) -> None:
        """Rows on screen such that the cursor's row is among them (``MapLayout.screen``),
        and columns such that its column is."""
        layout = self.map_layout
        self.rows = layout.screen(self.cursor, self.rows, self._height, centre)
        column = layout.column(self.cursor)
        columns = self._columns
        if column < self.left:
            self.left = max(0, column - columns // 4)
        elif column >= self.left + columns:
            self.left = column - columns + columns // 4 + 1

    def on_resize(self, _event: events.Resize) -> None:
        self.left = 0  # laid out again for the new size, the cursor centred
        self._place(centre=True)
        self.refresh()

    def on_mount(self) -> None:
        self._place(centre=True)

    def move_to(self, unit: Node, centre: bool = False) -> None:
        """Put the cursor on ``unit`` and bring it into view."""
        layout = self.map_layout
        before, rows, left = self.cursor, self.rows, self.left
        self.cursor = unit
        self._place(centre)
        if self.rows == rows and self.left == left:  # no scroll: two rows change at most
            width = self.size.width
            for moved in (before, unit):
                row = layout.row_of(moved)
                if row in rows:
                    self.refresh(Region(0, rows.index(row), width, 1))
        else:
            self.refresh()
        self.post_message(self.Moved(self, unit))

    # -- keys and mouse --------------------------------------------------------------
    def action_parent(self) -> None:
        self.move_to(self.map_layout.up(self.cursor))

    def action_child(self) -> None:
        self.move_to(self.map_layout.down(self.cursor, self.path))

    def action_sibling(self, step: int) -> None:
        self.move_to(self.map_layout.sibling(self.cursor, step))

    def action_page(self, step: int) -> None:
        layout = self.map_layout
        row = layout.step_rows(layout.row_of(self.cursor), step * max(1, self._height - 1))
        self.move_to(row)

    def action_home(self) -> None:
        self.move_to(self.map_layout.top)

    def action_end(self) -> None:
        self.move_to(self.map_layout.last_row(self.map_layout.top))

    def action_current(self) -> None:
        if self.current is not None:
            self.move_to(self.map_layout.unit_at(self.current), centre=True)

    def action_select(self) -> None:
        self.post_message(self.Selected(self, self.map_layout.end(self.cursor)))

    def _scroll(self, step: int) -> None:
        """The wheel: the rows move, the cursor stays (the next key brings it back)."""
        layout = self.map_layout
        if self.rows and (step < 0 or layout.next_row(self.rows[-1]) is not None):
            first = layout.step_rows(self.rows[0], step)
            self.rows = layout.rows_from(first, self._height)
            self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self._scroll(3)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self._scroll(-3)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or not 0 <= offset.y < len(self.rows):
            return
        at = self.left * CELLS + offset.x
        cells = self.map_layout.row(self.rows[offset.y], self.path, limit=at + 2)
        for index in (at, at + 1, at - 1):  # the glyph, or the connector beside it
            if 0 <= index < len(cells) and cells[index].kind != GUIDE:
                unit = cells[index].unit
                if unit is not None:
                    self.move_to(unit)
                    if event.chain > 1:
                        self.action_select()
                return

    # -- drawing ---------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None
        self._styles.clear()

    def _component(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:  # asked for per cell: Textual's lookup walks the styles
            style = self.get_component_rich_style(f"tree-map--{name}", partial=True)
            self._styles[name] = style
        return style

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._base is None:
            self._base = self.rich_style
        base = self._base
        if not 0 <= y < len(self.rows):
            return Strip.blank(width, base)
        self.drawn += 1
        skip = self.left * CELLS
        cells = self.map_layout.row(self.rows[y], self.path, limit=skip + width)
        segments = [self._segment(cell, base) for cell in cells[skip : skip + width]]
        return Strip(segments).crop_extend(0, width, base)

    def _segment(self, cell: Cell, base: Style) -> Segment:
        unit = cell.unit
        if cell.kind == GUIDE:
            if unit is not None and unit is self.cursor:
                return Segment(CURSOR_MARK, base + self._component("path"))
            style = base + self._component("path" if cell.on_path else "guide")
            return Segment(cell.text, style)
        assert unit is not None
        style = base
        text = cell.text
        if unit.origin is Origin.MODEL:
            style += self._component("model")
        if unit.id in self.path:
            style += self._component("path")
        mark = {"\u2605": "bookmark", "\u25cb": "unread", "\u2713": "good", "\u2717": "bad"}
        if text in mark:
            style += self._component(mark[text])
        current = self.current
        if current is not None and self.path.get(unit.id, unit) is None:
            style += self._component("current")  # the path ends here: the document's
        if unit is self.cursor:
            style += self._component("cursor")
        return Segment(text, style)


def unit_label(layout: MapLayout, unit: Node, text_of: Callable[[Node], str]) -> str:
    """A line about ``unit``: its first words, how many nodes and branches it holds."""
    end = layout.end(unit)
    if unit is layout.top and unit.parent is None:
        words = "start"
    else:
        words = safe_line(text_of(unit).strip()) or "\u2205"
        if len(words) > PREVIEW:
            words = words[: PREVIEW - 1] + "\u2026"
    nodes = 1
    at = end
    while at is not unit and at.parent is not None and nodes < 10_000:
        nodes += 1
        at = at.parent
    parts = [words]
    if nodes > 1:
        parts.append(f"{nodes} nodes")
    kids = len(layout.kids(unit))
    if kids > 1:
        parts.append(f"{kids} branches")
    return " \u00b7 ".join(parts)


class TreeMapScreen(DialogScreen[Node | None]):
    """The tree map over the editor: enter dismisses with the node to go to, escape
    with None. The line under the map says what the cursor is on."""

    DEFAULT_CSS = dialog_css(
        "TreeMapScreen",
        """
        & > Vertical { width: 100%; height: 100%; padding: 0 1; }
        & .dialog--title { margin-bottom: 0; }
        & .dialog--hint { margin-top: 0; }
        & #map-unit { width: 100%; height: 1; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="map_close"),
    ]

    def __init__(
        self,
        layout: MapLayout,
        current: Node | None,
        text_of: Callable[[Node], str],
        title: str = "Tree map",
    ) -> None:
        super().__init__()
        self.tree_map = TreeMap(layout, current, id="tree-map")
        self.text_of = text_of
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title(self.title_text)
            yield self.tree_map
            yield Label("", id="map-unit", markup=False)
            yield Label(
                "\u2190\u2192 h l parent, child \u00b7 \u2191\u2193 k j siblings \u00b7 "
                "pgup pgdn home end \u00b7 c current \u00b7 enter go \u00b7 esc close \u00b7 "
                "\u2605 bookmark \u25cb new \u25c6 folded run",
                classes="dialog--hint",
                markup=False,
            )

    def on_mount(self) -> None:
        self.tree_map.focus()
        self._say(self.tree_map.cursor)

    def _say(self, unit: Node) -> None:
        label = unit_label(self.tree_map.map_layout, unit, self.text_of)
        # A line of fixed size: no layout of the screen for it (a key stays cheap).
        self.query_one("#map-unit", Label).update(label, layout=False)

    def on_tree_map_moved(self, event: TreeMap.Moved) -> None:
        self._say(event.unit)

    def on_tree_map_selected(self, event: TreeMap.Selected) -> None:
        self.dismiss(event.node)

    def action_close(self) -> None:
        self.dismiss(None)
