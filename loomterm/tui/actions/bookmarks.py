"""Bookmarks and archiving, both kept in node ``meta`` (saved with the session):
bookmark the node at the caret, jump to the next bookmark, archive (hide) the branch at
the caret and everything below it, and restore it. The palette lists bookmarks through
:meth:`BookmarkActions.bookmarks`.
"""

from __future__ import annotations

from typing import Any

from loomterm.tree import Node
from loomterm.tui import ops
from loomterm.tui.actions.navigation import branch_of
from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.branch_tree import is_hidden
from loomterm.tui.widgets.dialogs import ConfirmScreen


def neighbour_of(branch: Node) -> Node | None:
    """Where to go when ``branch`` is archived: the next visible sibling, which takes
    its place (sibling 2 of 6 leaves sibling 2 of 5), else the one before it."""
    assert branch.parent is not None
    siblings = branch.parent.children
    index = siblings.index(branch)
    after = [c for c in siblings[index + 1 :] if not is_hidden(c)]
    before = [c for c in siblings[:index] if not is_hidden(c)]
    return after[0] if after else (before[-1] if before else None)


class BookmarkActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: bookmarks and archived branches."""

    def bookmarks(self) -> list[tuple[Node, str]]:
        marks = []
        for node in list(self.loom.tree.nodes.values()):  # the worker may be adding
            if node.meta.get("bookmark"):
                marks.append((node, safe_line(self.loom.text(node)[-40:].strip()) or "(empty)"))
        return marks

    def _set_meta(self, node: Node, **changes: Any) -> None:
        loom = self.loom

        def job() -> None:
            ops.set_meta(loom, node, **changes)

        self.submit("meta", job)

    def action_bookmark(self) -> None:
        node = self._caret_node() or self.doc.node
        if node is None or node.parent is None:
            self.bell()
            return
        marked = bool(node.meta.get("bookmark"))
        self._set_meta(node, bookmark=None if marked else True)
        self.notify("Bookmark removed" if marked else "Bookmarked", timeout=2)

    def action_next_bookmark(self) -> None:
        marks = [node for node, _ in self.bookmarks()]
        if not marks:
            self.notify("No bookmarks yet (alt+s sets one)", timeout=2)
            return
        current = self._caret_node()
        ids = [n.id for n in marks]
        after = [n for n in marks if current is None or n.id > current.id]
        target = after[0] if after else marks[ids.index(min(ids))]
        self.when_idle(lambda: self._enter(target), stop=True)

    def action_hide_branch(self) -> None:
        node = self._caret_node() or self.doc.node
        if node is None or node.parent is None:
            self.bell()
            return
        branch = branch_of(node, show_hidden=True)
        preview = safe_line(self.node_text(branch).strip())[:40]

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            self._set_meta(branch, hidden=True)
            parent = branch.parent
            assert parent is not None
            neighbour = neighbour_of(branch)
            self.when_idle(lambda: self._enter(neighbour) if neighbour else self.show_node(parent))
            self.notify("Branch archived: 'Show hidden branches' brings it back", timeout=4)

        self.push_screen(
            ConfirmScreen(
                f"Archive the branch {preview!r} and everything below it?", yes="Archive"
            ),
            confirmed,
        )

    def action_unhide_branch(self) -> None:
        node = self._caret_node() or self.doc.node
        while node is not None and not is_hidden(node):
            node = node.parent
        if node is None:
            self.notify("This branch is not archived", timeout=2)
            return
        self._set_meta(node, hidden=None)
        self.notify("Branch restored", timeout=2)
