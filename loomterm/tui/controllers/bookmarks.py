"""Bookmarks and archiving, both kept in node ``meta`` (saved with the session):
bookmark the node at the caret, jump to the next bookmark, archive (hide) the branch at
the caret and everything below it, and restore it. The palette lists bookmarks through
:meth:`Bookmarks.listed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loomterm.tree import Node
from loomterm.tui.branch_rows import is_hidden
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.sanitize import safe_line
from loomterm.tui.tidy_changes import Archive
from loomterm.tui.tree_places import branch_of
from loomterm.tui.widgets.dialogs import ConfirmScreen

if TYPE_CHECKING:
    from loomterm.tui.controllers.navigation import Navigation


def neighbour_of(branch: Node) -> Node | None:
    """Where to go when ``branch`` is archived: the next visible sibling, which takes
    its place (sibling 2 of 6 leaves sibling 2 of 5), else the one before it."""
    assert branch.parent is not None
    siblings = branch.parent.children
    index = siblings.index(branch)
    after = [c for c in siblings[index + 1 :] if not is_hidden(c)]
    before = [c for c in siblings[:index] if not is_hidden(c)]
    return after[0] if after else (before[-1] if before else None)


@dataclass(eq=False, repr=False)
class Bookmarks(Controller):
    """Bookmarks and archived branches."""

    navigation: Navigation

    def listed(self) -> list[tuple[Node, str]]:
        """Every bookmarked node, with a short preview of the text up to it."""
        loom = self.app.loom
        marks = []
        for node in list(loom.tree.nodes.values()):  # the worker may be adding
            if node.meta.get("bookmark"):
                marks.append((node, safe_line(loom.text(node)[-40:].strip()) or "(empty)"))
        return marks

    @key_action("bookmark")
    def toggle(self) -> None:
        """Bookmark the node at the caret, or remove its bookmark."""
        node = self.navigation.node_at_caret()
        if node is None:
            return
        marked = bool(node.meta.get("bookmark"))
        self.jobs.set_meta(node, bookmark=None if marked else True)
        self.app.notify("Bookmark removed" if marked else "Bookmarked", timeout=2)

    @key_action("next_bookmark")
    def next(self) -> None:
        """Go to the bookmark after the caret's node (by id), round to the first."""
        app = self.app
        marks = [node for node, _ in self.listed()]
        if not marks:
            app.notify("No bookmarks yet (alt+s sets one)", timeout=2)
            return
        current = self.navigation.caret_node()
        ids = [n.id for n in marks]
        after = [n for n in marks if current is None or n.id > current.id]
        target = after[0] if after else marks[ids.index(min(ids))]
        self.jobs.when_idle(lambda: self.navigation.enter(target), stop=True)

    @key_action()
    def hide_branch(self) -> None:
        """Archive the branch at the caret, once the user confirms."""
        app = self.app
        node = self.navigation.node_at_caret()
        if node is None:
            return
        branch = branch_of(node, show_hidden=True)
        preview = safe_line(app.panes.node_text(branch).strip())[:40]

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            self.jobs.set_meta(branch, hidden=True)
            parent = branch.parent
            assert parent is not None
            neighbour = neighbour_of(branch)
            navigation = self.navigation

            def leave() -> None:
                if neighbour is not None:
                    navigation.enter(neighbour)
                else:
                    navigation.show_node(parent)
                app.history.attach(Archive(branch))  # undo brings the branch back

            self.jobs.when_idle(leave)
            app.notify("Branch archived \u00b7 undo brings it back", timeout=4)

        app.push_screen(
            ConfirmScreen(
                f"Archive the branch {preview!r} and everything below it?", yes="Archive"
            ),
            confirmed,
        )

    @key_action()
    def unhide_branch(self) -> None:
        """Restore the archived branch the caret is in."""
        app = self.app
        node = self.navigation.caret_node() or app.doc.node
        while node is not None and not is_hidden(node):
            node = node.parent
        if node is None:
            app.notify("This branch is not archived", timeout=2)
            return
        self.jobs.set_meta(node, hidden=None)
        app.notify("Branch restored", timeout=2)
