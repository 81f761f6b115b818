"""Tidying the tree from the editor: split the node at the caret (alt+k by default),
merge the node at the caret into its parent (alt+j), pick up the branch at the caret
(alt+c) and move it to hang at the caret somewhere else (alt+y, "yank" it there).

Each runs in the engine worker (``tui.tidy_changes``), is saved in the session as it
happens, and goes on the undo history as a change: ctrl+z reverts it (the same nodes
come back, ids and all), ctrl+y applies it again. :meth:`Tidy.undo` and
:meth:`Tidy.redo` take over from navigation's when the place being left or re-entered
holds such a change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tree import Node
from loomterm.tui import ops, tidy_changes
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.feedback import NO_BRANCH, refuse
from loomterm.tui.history import Place
from loomterm.tui.sanitize import safe_line
from loomterm.tui.tree_places import branch_of

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.tui.controllers.looks import Looks
    from loomterm.tui.controllers.navigation import Navigation


@dataclass
class Tidied(Message):
    """A tidying job (or its undo or redo) finished: show ``node``'s path with the caret
    at ``caret`` (None: the end of ``focus``'s text); ``change`` goes on the history
    (None for an undo or redo, which move along it instead)."""

    node: Node
    caret: int | None
    change: tidy_changes.Change | None
    focus: Node | None
    done: str = ""


@dataclass(eq=False, repr=False)
class Tidy(Controller):
    """Split, merge and move, their undo and redo; holds the branch picked up."""

    navigation: Navigation
    looks: Looks
    picked_up: Node | None = field(default=None, init=False)  # the branch alt+c picked up, to move

    # -- the three operations ----------------------------------------------------------
    def caret_position(self) -> tuple[Node, int] | None:
        """The path's last node and the whole tokens before the caret (synced text)."""
        node = self.app.doc.node
        if node is None:
            return None
        position, _ = ops.split_at_char(self.app.loom, node, self.app.doc.caret)
        return node, position

    @key_action("split_node", when_idle=True, stop=True)
    def split(self) -> None:
        """Split the node at the caret (a job; undoable)."""
        app = self.app
        place = self.caret_position()
        if place is None:
            refuse(app, NO_BRANCH)
            return
        node, position = place
        loom, caret = app.loom, app.doc.caret

        def job() -> None:
            change = tidy_changes.split_at(loom, node, position)
            app.post_message(Tidied(node, caret, change, None))

        self.jobs.submit("split", job, lock=True)

    @key_action("merge_node", when_idle=True, stop=True)
    def merge(self) -> None:
        """Merge the node at the caret into its parent (a job; undoable)."""
        app = self.app
        node = self.navigation.caret_node()
        shown = app.doc.node
        if node is None or shown is None or node.parent is None:
            refuse(app, NO_BRANCH)
            return
        loom, caret = app.loom, app.doc.caret

        def job() -> None:
            change = tidy_changes.merge_into_parent(loom, node)
            app.post_message(Tidied(shown, caret, change, None))

        self.jobs.submit("merge", job, lock=True)

    @key_action("pick_up_branch")
    def pick_up(self) -> None:
        """Remember the branch at the caret, to move it with :meth:`move_here`."""
        app = self.app
        node = self.navigation.node_at_caret()
        if node is None:
            return
        self.picked_up = branch_of(node, show_hidden=True)
        preview = safe_line(app.panes.node_text(self.picked_up).strip())[:30]
        key = self.looks.key_for("move_branch_here")
        app.notify(f"Picked up {preview!r}: put the caret where it goes, then {key}", timeout=5)

    @key_action("move_branch_here", when_idle=True, stop=True)
    def move_here(self) -> None:
        """Hang the branch picked up at the caret (a job; undoable)."""
        app = self.app
        branch = self.picked_up
        if branch is None:
            key = self.looks.key_for("pick_up_branch")
            app.notify(f"Pick up a branch first ({key} on it)", timeout=3)
            return
        place = self.caret_position()
        if place is None:
            refuse(app, NO_BRANCH)
            return
        node, position = place
        loom = app.loom

        def job() -> None:
            change = tidy_changes.move_here(loom, branch, node, position)
            app.post_message(Tidied(branch, None, change, branch))

        self.jobs.submit("move", job, lock=True)

    # -- showing the result, undo and redo ------------------------------------------------
    def tidied(self, message: Tidied) -> None:
        """On the UI thread: show what a tidying job left, and put it on the history."""
        app = self.app
        if message.change is not None and isinstance(message.change, tidy_changes.Move):
            self.picked_up = None
        app.lifecycle.note_change()
        app.panes.rebuild_tree_soon()
        node = message.node
        if node.id not in app.loom.tree.nodes:  # merged away: show what took it in
            node = app.loom.cursor
        leaf = self.navigation.leaf_below(node) if message.focus is not None else node
        doc = app.doc
        doc.show(leaf)
        caret = message.caret
        if caret is None:
            end = doc.end_of(message.focus) if message.focus is not None else None
            caret = doc.length if end is None else end
        doc.move_to(min(caret, doc.length))
        app.view.follow = False
        app.view.document_changed()
        self.navigation.arrive(leaf, record=False)
        if message.change is not None:
            app.history.push(Place(leaf, doc.caret, change=message.change))
            undo = self.looks.key_for("undo")
            app.notify(
                f"{message.change.label.capitalize()} done \u00b7 {undo} undoes it", timeout=2
            )
        else:
            app.notify(message.done, timeout=2)

    @key_action(when_idle=True, stop=True)
    def undo(self) -> None:
        """Revert the change at this place, or (none here) navigation's undo."""
        history = self.app.history
        current = history.current
        if current is None or current.change is None or not history.can_undo:
            self.navigation.undo()
            return
        place = history.undo()
        assert place is not None
        self.replay(current.change.undo, place, "undo", f"Undid the {current.change.label}")

    @key_action(when_idle=True, stop=True)
    def redo(self) -> None:
        """Apply the change at the next place again, or (none there) go there as
        navigation does, with the text that place had."""
        history = self.app.history
        following = history.following
        if following is None or following.change is None:
            self.navigation.redo()
            return
        place = history.redo()
        assert place is not None
        self.replay(following.change.redo, place, "redo", f"Redid the {following.change.label}")

    def replay(self, step: Callable[[Loom], object], place: Place, label: str, done: str) -> None:
        """Run an undo or redo ``step`` in the worker, then show ``place``."""
        app = self.app
        loom = app.loom

        def job() -> None:
            step(loom)
            app.post_message(Tidied(place.node, place.caret, None, None, done))

        self.jobs.submit(label, job, lock=True)
