"""Hoisting: working inside one branch as if it were the whole tree (socketteer's loom
hoists the same way). The branch pane and the tree map show only the subtree of the
hoisted node; the document still shows the whole path, its text above the hoist point
marked as outside (``DocumentView.outside``).

The hoisted node is kept in the session file (``session.record_hoist``, the ``hoist``
key: a view of the session, not its content) and hoisted again when the session is
opened. Going somewhere outside the hoisted branch (undo, a bookmark, a search hit)
lets go of the hoist, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.feedback import NO_BRANCH, refuse
from loomterm.tui.sanitize import safe_line

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.tree import Node
    from loomterm.tui.controllers.editor import Editor

LABEL = 24  # characters of the hoisted node's text in notes and titles


@dataclass(eq=False, repr=False)
class Hoist:
    """Which node the tree is hoisted at (None: the whole tree)."""

    app: Editor
    node_id: int | None = field(default=None, init=False)
    _loom: Loom | None = field(default=None, init=False)  # the loom the saved hoist was read for

    @property
    def node(self) -> Node | None:
        """The hoisted node, if it is (still) in the tree."""
        self._restore()
        if self.node_id is None:
            return None
        return self.app.loom.tree.nodes.get(self.node_id)

    def top(self) -> Node:
        """The node the branch pane and the map start from."""
        return self.node or self.app.loom.root

    def label(self) -> str:
        """The hoisted node's first words (for notes and titles)."""
        node = self.node
        if node is None:
            return ""
        text = safe_line(self.app.panes.node_text(node).strip()) or "\u2205"
        return repr(text[:LABEL] + ("\u2026" if len(text) > LABEL else ""))

    def _restore(self) -> None:
        """Take the hoist the session file keeps, once per loom (a session switch, or
        the model arriving after a preview, brings a new one)."""
        loom = self.app.loom
        if self._loom is loom:
            return
        from loomterm.sessions.session import saved_hoist

        self._loom = loom
        # Another session's hoist never carries over (its ids name other nodes); a
        # preview has no session yet: the file's hoist comes with the real Loom.
        self.node_id = saved_hoist(loom)

    def _record(self) -> None:
        from loomterm.sessions.session import record_hoist

        record_hoist(self.app.loom, self.node_id)

    @key_action()
    def hoist(self) -> None:
        """Hoist at the branch the caret is in."""
        app = self.app
        self._restore()
        node = app.doc.node_before_caret() or app.doc.node
        if node is None or node.parent is None:
            refuse(app, NO_BRANCH)
            return
        self.node_id = node.id
        self._record()
        self._show()
        app.notify(f"Hoisted at {self.label()}: the tree shows only this branch", timeout=3)

    @key_action()
    def unhoist(self, why: str = "") -> None:
        """Show the whole tree again."""
        app = self.app
        if self.node is None:
            self.node_id = None
            app.notify("Not hoisted: the tree shows all of it", timeout=2)
            return
        self.node_id = None
        self._record()
        self._show()
        app.notify(why or "Unhoisted: the tree shows all of it", timeout=3)

    def arrived(self, node: Node) -> None:
        """The document now stands on ``node``: outside the hoisted branch lets go of
        the hoist; inside it, mark the text above it."""
        hoisted = self.node
        if hoisted is not None and not hoisted.is_ancestor_of(node):
            self.unhoist("Left the hoisted branch: the tree shows all of it again")
            return
        self.mark_outside()

    def mark_outside(self) -> None:
        """Tell the document where the hoisted branch's text begins."""
        app = self.app
        hoisted = self.node
        outside = 0
        if hoisted is not None:
            doc = app.doc
            for block, start in zip(doc.blocks, doc.block_starts, strict=False):
                if block.node is hoisted:
                    outside = start
                    break
        app.view.mark_outside(outside)

    def _show(self) -> None:
        app = self.app
        app.panes.rebuild_tree()
        app.tree_map.changed("move")
        self.mark_outside()
