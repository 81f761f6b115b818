"""The tree map (``loomterm.tui.widgets.tree_map``): opened over the editor on the
whole tree, or the hoisted branch (``tui.controllers.hoist``); enter goes to the branch
under its cursor.

The map's layout (``loomterm.tree_map.MapLayout``) finds what it draws as it is asked
and keeps it while the tree is the same: it is kept here per version of the tree (every
change the Loom reports bumps it), so opening the map again on an unchanged tree starts
from what the last opening found. A change while the map is open gives it a new layout
with its cursor where it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tree_map import MapLayout
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.widgets.tree_map import TreeMapScreen

if TYPE_CHECKING:
    from loomterm.tree import Node
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.hoist import Hoist
    from loomterm.tui.controllers.navigation import Navigation

# The Loom's events that change what the map draws (its shape or a node's marks).
CHANGES = frozenset({"add", "split", "update", "rewrite", "move", "merge"})


@dataclass(eq=False, repr=False)
class TreeMapper:
    """Opens the tree map and keeps its layout per version of the tree."""

    app: Editor
    navigation: Navigation
    hoist: Hoist
    version: int = field(default=0, init=False)
    screen: TreeMapScreen | None = field(default=None, init=False)
    _layout: MapLayout | None = field(default=None, init=False)
    _key: tuple[int, int, bool, int] | None = field(default=None, init=False)

    def layout(self) -> MapLayout:
        """The layout of the tree as it is now (kept while it does not change)."""
        app = self.app
        top = self.hoist.top()
        show_hidden = app.branches.show_hidden
        key = (self.version, top.id, show_hidden, id(app.loom))
        if self._layout is None or self._key != key:
            self._layout = MapLayout(top, show_hidden)
            self._key = key
        return self._layout

    def changed(self, event: str) -> None:
        """The Loom reported ``event``: a new version of the tree for the map."""
        if event not in CHANGES:
            return
        self.version += 1
        screen = self.screen
        if screen is not None and screen.is_attached:
            screen.tree_map.use(self.layout(), self.app.doc.node)

    @key_action("tree_map")
    def open(self) -> None:
        """Open the map, its cursor on the document's branch."""
        app = self.app
        hoisted = self.hoist.node
        title = "Tree map"
        if hoisted is not None:
            title += f" \u00b7 hoisted at {self.hoist.label()}"
        self.screen = screen = TreeMapScreen(
            self.layout(), app.doc.node, app.panes.node_text, title
        )

        def chosen(node: Node | None) -> None:
            self.screen = None
            if node is not None:
                self.navigation.go_to(node)

        app.push_screen(screen, chosen)
