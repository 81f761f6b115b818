"""Navigation: where the document stands in the tree and how it gets there.

Siblings (alt+left/right by default), branch points (alt+up/down), undo and redo (moves
back and forth between places, see ``history.py``), going to a node (the branch pane,
bookmarks, the palette) and where entering a subtree lands (where the user last was
below it). All of it only reads the tree, so it runs on the UI thread once the app is
idle (``LoomApp.when_idle``). Showing another node always ends in ``_arrive``, which
tells the Loom's cursor, the undo history and the branch pane.
"""

from __future__ import annotations

from loomterm.tree import WRITER, Node
from loomterm.tui import ops
from loomterm.tui.history import Place
from loomterm.tui.messages import Moved
from loomterm.tui.widgets.branch_tree import BranchTree, is_hidden, visible_children
from loomterm.tui.widgets.document_view import DocumentView


def branch_of(node: Node, show_hidden: bool = False) -> Node:
    """The first node of the branch holding ``node``: up through single children to
    just below the nearest branch point (or the root)."""
    while (
        node.parent is not None
        and node.parent.parent is not None
        and len(visible_children(node.parent, show_hidden)) <= 1
    ):
        node = node.parent
    return node


def siblings_of(node: Node, show_hidden: bool = False) -> list[Node]:
    """``node`` and its visible siblings, in order (``node`` even when archived)."""
    if node.parent is None:
        return [node]
    return [s for s in node.parent.children if show_hidden or not is_hidden(s) or s is node]


def place_of(node: Node, show_hidden: bool = False) -> tuple[int, int, int]:
    """Where ``node``'s branch stands: ``(its number among its siblings, from 1; how
    many siblings; depth, the branch points above it)``."""
    branch = branch_of(node, show_hidden)
    siblings = siblings_of(branch, show_hidden)
    depth = 0
    item: Node | None = branch
    while item is not None and item.parent is not None:
        if len(siblings_of(item, show_hidden)) > 1:
            depth += 1
        item = item.parent
    return siblings.index(branch) + 1, len(siblings), depth


class NavigationActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: moving around the tree."""

    def _arrive(self, node: Node, record: bool = True, engine: bool = True) -> None:
        """The document now stands on ``node``: tell the engine, history, the pane.
        ``engine`` False leaves the loom's cursor to the worker (a generation sets it,
        and setting it here would wait for the engine)."""
        if engine and self.loom.cursor is not node:
            self.loom.cursor = node
        if record:
            # With the text: a node the writer retypes in place reads differently later.
            self.history.push(Place(node, self.doc.caret, self.doc.text))
        self._remember(node)
        tree = self.branches
        if tree.display and not tree.has_class("-hidden"):
            tree.set_path(self.doc.path, node)
        self._refresh_status_soon()

    def _remember(self, node: Node) -> None:
        for item in node.path():
            self._last_seen[item.id] = node

    def show_node(self, node: Node, caret: int | None = None, record: bool = True) -> None:
        """Show ``node``'s path with the caret at ``caret`` (default: the end)."""
        self.typing_run = ops.TypingRun()  # typing here begins a new run
        self.doc.show(node)
        self.doc.move_to(self.doc.length if caret is None else caret)
        self.view.follow = self.doc.caret >= self.doc.length
        self.view.document_changed()
        self._arrive(node, record=record)

    def go_to_node(self, node: Node) -> None:
        """Move the document to ``node`` (branch pane, bookmarks)."""
        self.when_idle(lambda: self.show_node(node), stop=True)

    def _leaf_below(self, node: Node) -> Node:
        """Where to land when entering ``node``'s subtree: where the user last was below
        it, else the newest visible branch."""
        seen = self._last_seen.get(node.id)
        if seen is not None and node.is_ancestor_of(seen) and seen.id in self.loom.tree.nodes:
            return seen
        show_hidden = self.branches.show_hidden
        while True:
            kids = visible_children(node, show_hidden)
            if not kids:
                return node
            node = kids[-1]

    def _caret_node(self) -> Node | None:
        return self.doc.node_before_caret()

    def action_sibling(self, step: int) -> None:
        self.when_idle(lambda: self._sibling(step), stop=True)

    def _sibling(self, step: int) -> None:
        node = self._caret_node()
        if node is None or node.parent is None:
            self.bell()
            return
        show_hidden = self.branches.show_hidden
        node = branch_of(node, show_hidden)
        siblings = siblings_of(node, show_hidden)
        if len(siblings) < 2:
            self.notify("No other branch here", timeout=2)
            return
        target = siblings[(siblings.index(node) + step) % len(siblings)]
        self._enter(target)

    def _enter(self, target: Node) -> None:
        """Show ``target``'s branch with the caret at the end of ``target``'s text."""
        self.typing_run = ops.TypingRun()
        leaf = self._leaf_below(target)
        self.doc.show(leaf)
        end = self.doc.end_of(target)
        self.doc.move_to(self.doc.length if end is None else end)
        self.view.follow = False
        self.view.document_changed()
        self._arrive(leaf)

    def action_branch_point(self, step: int) -> None:
        self.when_idle(lambda: self._branch_point(step), stop=True)

    def _branch_point(self, step: int) -> None:
        """Move the caret to the nearest place above (``step`` < 0) or below it where the
        path forks (the end of a node with more than one visible child); below the last
        fork, down goes to the end of the document."""
        path = self.doc.path
        if not path:
            self.bell()
            return
        show_hidden = self.branches.show_hidden
        caret = self.doc.caret
        forks = sorted(
            end
            for node in path[:-1]
            if len(visible_children(node, show_hidden)) > 1
            and (end := self.doc.end_of(node)) is not None
        )
        if step < 0:
            targets = [end for end in forks if end < caret][-1:]
        else:
            targets = [end for end in forks if end > caret][:1] or (
                [self.doc.length] if forks and caret < self.doc.length else []
            )
        if targets:
            self.doc.move_to(targets[0])
            self.view.caret_moved()
            return
        self.notify("No branch point " + ("above" if step < 0 else "below"), timeout=2)

    def action_undo(self) -> None:
        self.when_idle(self._undo, stop=True)

    def _undo(self) -> None:
        place = self.history.undo()
        if place is None:
            self.notify("Nothing to undo", timeout=2)
            return
        self._go_back_to(place)

    def _go_back_to(self, place: Place) -> None:
        """Show ``place`` (an undo or redo). Its text may differ from its node's now (the
        writer retyped the node in place, or the text was not synced then): then the
        text is put back as an edit, which the engine applies in place where it can
        (the writer's own childless node), else as a new branch; nothing is lost."""
        node = self._restore_onto(place)
        self.show_node(node, place.caret, record=False)
        if place.text is not None and self.doc.text != place.text:
            self.doc.become(place.text)
            self.doc.move_to(place.caret)
            self.view.follow = self.doc.caret >= self.doc.length
            self.view.document_changed()
            self.view.post_message(DocumentView.Edited(self.view))

    def _restore_onto(self, place: Place) -> Node:
        """Where an undo to ``place`` shows its text: the node shown now, when it is the
        writer's childless node below ``place.node`` and the text differs only inside
        it (then the undo retypes it in place instead of branching); else
        ``place.node``."""
        current = self.doc.node
        text = place.text
        if (
            text is None
            or current is None
            or current is place.node
            or current.children
            or current.origin not in WRITER
            or current.parent is None
            or not place.node.is_ancestor_of(current)
        ):
            return place.node
        start = self.doc.end_of(current.parent)
        if start is None or not text.startswith(self.doc.text[:start]):
            return place.node
        return current

    def action_redo(self) -> None:
        self.when_idle(self._redo, stop=True)

    def _redo(self) -> None:
        place = self.history.redo()
        if place is None:
            self.notify("Nothing to redo", timeout=2)
            return
        self._go_back_to(place)

    def on_document_view_caret_moved(self, event: DocumentView.CaretMoved) -> None:
        run = self.typing_run
        if run.ids:
            node = self.doc.node_before_caret()
            if node is not None and node.id not in run.ids:
                self.typing_run = ops.TypingRun()  # the caret left the run's text
        self._refresh_status_soon()  # the sibling and depth of the caret's branch

    def action_branch_here(self) -> None:
        """The next keystroke makes a new branch, even in text of the writer's own that
        would be retyped in place; the old text stays as it is."""
        self.typing_run = ops.TypingRun(branch=True)
        self.notify("The next edit starts a new branch here", timeout=2)

    def caret_place(self) -> str:
        """``sibling 2 of 4 · depth 1`` for the branch at the caret ("" at the start)."""
        node = self._caret_node()
        if node is None or node.parent is None:
            return ""
        index, count, depth = place_of(node, self.branches.show_hidden)
        return f"sibling {index} of {count} \u00b7 depth {depth}"

    def on_branch_tree_selected(self, event: BranchTree.Selected) -> None:
        self.go_to_node(event.chain.last)

    def on_moved(self, message: Moved) -> None:
        """A job (a pick, a recompute, a chat turn) made ``message.node``: show it."""
        self.show_node(message.node)
        if message.then_generate:
            self.when_idle(lambda: self._generate(1), sync=False)
