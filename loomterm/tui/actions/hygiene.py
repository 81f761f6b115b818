"""Tidying the tree from the editor: split the node at the caret (alt+k by default),
merge the node at the caret into its parent (alt+j), pick up the branch at the caret
(alt+c) and move it to hang at the caret somewhere else (alt+y, "yank" it there).

Each runs in the engine worker (``tui.tidy``), is saved in the session as it
happens, and goes on the undo history as a change: ctrl+z reverts it (the same nodes
come back, ids and all), ctrl+y applies it again. The undo and redo here take over
from navigation's when the place being left or re-entered holds such a change.
"""

from __future__ import annotations

from textual.message import Message

from loomterm.tree import Node
from loomterm.tui import ops, tidy
from loomterm.tui.actions.navigation import branch_of
from loomterm.tui.history import Place
from loomterm.tui.sanitize import safe_line


class Restructured(Message):
    """A tidying job (or its undo or redo) finished: show ``node``'s path with the caret
    at ``caret`` (None: the end of ``focus``'s text); ``change`` goes on the history
    (None for an undo or redo, which move along it instead)."""

    def __init__(
        self,
        node: Node,
        caret: int | None,
        change: tidy.Change | None,
        focus: Node | None,
        done: str = "",
    ) -> None:
        super().__init__()
        self.node = node
        self.caret = caret
        self.change = change
        self.focus = focus
        self.done = done


class HygieneActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp` before the navigation mixin (its
    ``_undo`` and ``_redo`` wrap navigation's)."""

    _picked_up: Node | None = None

    # -- the three operations ----------------------------------------------------------
    def _caret_position(self) -> tuple[Node, int] | None:
        """The path's last node and the whole tokens before the caret (synced text)."""
        node = self.doc.node
        if node is None:
            return None
        position, _ = ops.split_at_char(self.loom, node, self.doc.caret)
        return node, position

    def action_split_node(self) -> None:
        self.when_idle(self._split_node, stop=True)

    def _split_node(self) -> None:
        place = self._caret_position()
        if place is None:
            self.bell()
            return
        node, position = place
        loom, caret = self.loom, self.doc.caret

        def job() -> None:
            change = tidy.split_at(loom, node, position)
            self.post_message(Restructured(node, caret, change, None))

        self.submit("split", job, lock=True)

    def action_merge_node(self) -> None:
        self.when_idle(self._merge_node, stop=True)

    def _merge_node(self) -> None:
        node = self._caret_node()
        shown = self.doc.node
        if node is None or shown is None or node.parent is None:
            self.bell()
            return
        loom, caret = self.loom, self.doc.caret

        def job() -> None:
            change = tidy.merge_into_parent(loom, node)
            self.post_message(Restructured(shown, caret, change, None))

        self.submit("merge", job, lock=True)

    def action_pick_up_branch(self) -> None:
        node = self._caret_node() or self.doc.node
        if node is None or node.parent is None:
            self.bell()
            return
        self._picked_up = branch_of(node, show_hidden=True)
        preview = safe_line(self.node_text(self._picked_up).strip())[:30]
        key = self._key_for("move_branch_here")
        self.notify(f"Picked up {preview!r}: put the caret where it goes, then {key}", timeout=5)

    def action_move_branch_here(self) -> None:
        self.when_idle(self._move_branch, stop=True)

    def _move_branch(self) -> None:
        branch = self._picked_up
        if branch is None:
            key = self._key_for("pick_up_branch")
            self.notify(f"Pick up a branch first ({key} on it)", timeout=3)
            return
        place = self._caret_position()
        if place is None:
            self.bell()
            return
        node, position = place
        loom = self.loom

        def job() -> None:
            change = tidy.move_here(loom, branch, node, position)
            self.post_message(Restructured(branch, None, change, branch))

        self.submit("move", job, lock=True)

    # -- showing the result, undo and redo ------------------------------------------------
    def on_restructured(self, message: Restructured) -> None:
        if message.change is not None and isinstance(message.change, tidy.Move):
            self._picked_up = None
        self._note_change()
        self._rebuild_tree_soon()
        node = message.node
        if node.id not in self.loom.tree.nodes:  # merged away: show what took it in
            node = self.loom.cursor
        leaf = self._leaf_below(node) if message.focus is not None else node
        self.doc.show(leaf)
        caret = message.caret
        if caret is None:
            end = self.doc.end_of(message.focus) if message.focus is not None else None
            caret = self.doc.length if end is None else end
        self.doc.move_to(min(caret, self.doc.length))
        self.view.follow = False
        self.view.document_changed()
        if message.change is not None:
            self._arrive(leaf, record=False)
            self.history.push(Place(leaf, self.doc.caret, change=message.change))
        else:
            self._arrive(leaf, record=False)
        if message.change is not None:
            undo = self._key_for("undo")
            self.notify(
                f"{message.change.label.capitalize()} done \u00b7 {undo} undoes it", timeout=2
            )
        else:
            self.notify(message.done, timeout=2)

    def _undo(self) -> None:
        current = self.history.current
        if current is None or current.change is None or not self.history.can_undo:
            super()._undo()  # type: ignore[misc]
            return
        place = self.history.undo()
        assert place is not None
        self._replay(current.change.undo, place, "undo", f"Undid the {current.change.label}")

    def _redo(self) -> None:
        if not self.history.can_redo:
            super()._redo()  # type: ignore[misc]
            return
        place = self.history.redo()
        assert place is not None
        if place.change is None:
            self.show_node(place.node, place.caret, record=False)
            return
        self._replay(place.change.redo, place, "redo", f"Redid the {place.change.label}")

    def _replay(self, step, place: Place, label: str, done: str) -> None:
        loom = self.loom

        def job() -> None:
            step(loom)
            self.post_message(Restructured(place.node, place.caret, None, None, done))

        self.submit(label, job, lock=True)
