"""Navigation: where the document stands in the tree and how it gets there.

Siblings (alt+left/right by default), branch points (alt+up/down), undo and redo (moves
back and forth between places, see ``history.py``), going to a node (the branch pane,
bookmarks, the palette) and where entering a subtree lands (where the user last was
below it). All of it only reads the tree, so it runs on the UI thread once the app is
idle (:meth:`~loomterm.tui.controllers.jobs.Jobs.when_idle`). Showing another node
always ends in :meth:`Navigation.arrive`, which tells the Loom's cursor, the undo
history and the branch pane.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tree import WRITER, Node
from loomterm.tui import ops
from loomterm.tui.branch_rows import is_hidden, visible_children
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.feedback import NO_BRANCH, refuse
from loomterm.tui.history import Place
from loomterm.tui.tree_places import branch_of, place_of, siblings_of
from loomterm.tui.widgets.document_view import DocumentView

if TYPE_CHECKING:
    pass


@dataclass(eq=False, repr=False)
class Navigation(Controller):
    """Moving around the tree; remembers where the user last was below each node."""

    @dataclass
    class Moved(Message):
        """A job produced a new place to show (a picked token, a chat turn, a refresh)."""

        node: Node
        then_generate: bool = False

    # node id -> deepest node last shown below it
    last_seen: dict[int, Node] = field(default_factory=dict, init=False)
    # the typing run undo's edits write into
    undo_run: ops.TypingRun | None = field(default=None, init=False)

    def arrive(self, node: Node, record: bool = True, engine: bool = True) -> None:
        """The document now stands on ``node``: tell the engine, history, the pane.
        ``engine`` False leaves the loom's cursor to the worker (a generation sets it,
        and setting it here would wait for the engine)."""
        app = self.app
        if engine and app.loom.cursor is not node:
            app.loom.cursor = node
        if record:
            # With the text: a node the writer retypes in place reads differently later.
            app.history.push(Place(node, app.doc.caret, app.doc.text))
        self.remember(node)
        app.unread.visited(node)
        app.hoist.arrived(node)
        tree = app.branches
        if tree.display and not tree.has_class("-hidden"):
            tree.set_path(app.doc.path, node)
        app.status_line.soon()

    def remember(self, node: Node) -> None:
        """``node`` is where the user is now below each node of its path."""
        for item in node.path():
            self.last_seen[item.id] = node

    def show_node(self, node: Node, caret: int | None = None, record: bool = True) -> None:
        """Show ``node``'s path with the caret at ``caret`` (default: the end)."""
        app = self.app
        app.typing.run = ops.TypingRun()  # typing here begins a new run
        app.doc.show(node)
        app.doc.move_to(app.doc.length if caret is None else caret)
        app.view.follow = app.doc.caret >= app.doc.length
        app.view.document_changed()
        self.arrive(node, record=record)

    def go_to(self, node: Node) -> None:
        """Move the document to ``node`` (branch pane, bookmarks), once idle."""
        self.jobs.when_idle(lambda: self.show_node(node), stop=True)

    def show_at(self, leaf: Node, caret: int) -> None:
        """Show ``leaf``'s path with the caret at ``caret`` (clamped), not following."""
        app = self.app
        app.doc.show(leaf)
        app.doc.move_to(min(caret, app.doc.length))
        app.view.follow = False
        app.view.document_changed()
        self.arrive(leaf)

    def leaf_below(self, node: Node) -> Node:
        """Where to land when entering ``node``'s subtree: where the user last was below
        it, else the newest visible branch."""
        seen = self.last_seen.get(node.id)
        if seen is not None and node.is_ancestor_of(seen) and seen.id in self.app.loom.tree.nodes:
            return seen
        show_hidden = self.app.branches.show_hidden
        while True:
            kids = visible_children(node, show_hidden)
            if not kids:
                return node
            node = kids[-1]

    def caret_node(self) -> Node | None:
        """The node holding the character before the caret (None at the start)."""
        return self.app.doc.node_before_caret()

    def node_at_caret(self) -> Node | None:
        """The node at the caret (before it, else the document's last), or None after
        saying there is no branch there (at the start, or an empty document)."""
        node = self.caret_node() or self.app.doc.node
        if node is None or node.parent is None:
            refuse(self.app, NO_BRANCH)
            return None
        return node

    @key_action(when_idle=True, stop=True)
    def sibling(self, step: int) -> None:
        """Show the next (``step`` 1) or previous (-1) sibling of the caret's branch."""
        app = self.app
        node = self.caret_node()
        if node is None or node.parent is None:
            refuse(app, NO_BRANCH)
            return
        show_hidden = app.branches.show_hidden
        node = branch_of(node, show_hidden)
        siblings = siblings_of(node, show_hidden)
        if len(siblings) < 2:
            app.notify("No other branch here", timeout=2)
            return
        target = siblings[(siblings.index(node) + step) % len(siblings)]
        self.enter(target)

    def enter(self, target: Node) -> None:
        """Show ``target``'s branch with the caret at the end of ``target``'s text."""
        self.app.typing.run = ops.TypingRun()
        doc = self.app.doc
        leaf = self.leaf_below(target)
        doc.show(leaf)
        end = doc.end_of(target)
        doc.move_to(doc.length if end is None else end)
        self.app.view.follow = False
        self.app.view.document_changed()
        self.arrive(leaf)

    @key_action(when_idle=True, stop=True)
    def branch_point(self, step: int) -> None:
        """Move the caret to the nearest place above (``step`` < 0) or below it where the
        path forks (the end of a node with more than one visible child); below the last
        fork, down goes to the end of the document."""
        app = self.app
        doc = app.doc
        path = doc.path
        if not path:
            refuse(app, "No text yet: no branch points")
            return
        show_hidden = app.branches.show_hidden
        caret = doc.caret
        forks = sorted(
            end
            for node in path[:-1]
            if len(visible_children(node, show_hidden)) > 1
            and (end := doc.end_of(node)) is not None
        )
        if step < 0:
            targets = [end for end in forks if end < caret][-1:]
        else:
            targets = [end for end in forks if end > caret][:1] or (
                [doc.length] if forks and caret < doc.length else []
            )
        if targets:
            doc.move_to(targets[0])
            app.view.caret_moved()
            return
        app.notify("No branch point " + ("above" if step < 0 else "below"), timeout=2)

    def undo(self) -> None:
        """Back to the place before this one on the history, passing over places on
        branches archived since (undo never lands on a hidden branch)."""
        place = self.step(self.app.history.undo, self.app.history.redo)
        if place is None:
            self.app.notify("Nothing to undo", timeout=2)
            return
        self.go_back_to(place)

    def step(self, move: Callable[[], Place | None], back: Callable[[], object]) -> Place | None:
        """Move along the history (``move``: its undo or redo) to the nearest place not
        on an archived branch; where there is none, stay (``back`` each step taken)."""
        taken = 0
        while (place := move()) is not None:
            taken += 1
            if not self.hidden(place.node):
                return place
        for _ in range(taken):
            back()
        return None

    def hidden(self, node: Node) -> bool:
        """``node`` is on an archived branch that the writer does not see now."""
        if self.app.branches.show_hidden:
            return False
        return any(is_hidden(item) for item in node.path())

    def go_back_to(self, place: Place) -> None:
        """Show ``place`` (an undo or redo). Its text may differ from its node's now (the
        writer retyped the node in place, or the text was not synced then): then the
        text is put back as an edit. An edit that takes away text the tree holds makes
        a new branch, so the text taken stays in the tree as a sibling (a redo finds it
        there) and nothing typed is lost; the undo run's own branch is then edited in
        place, so undoing word by word makes one branch, not one a word."""
        app = self.app
        previous = app.typing.run
        node = self.restore_onto(place)
        self.show_node(node, place.caret, record=False)
        if place.text is not None and app.doc.text != place.text:
            run = previous if previous is self.undo_run else ops.TypingRun()
            shown = app.doc.node
            takes_away = not place.text.startswith(app.doc.text)
            run.branch = takes_away and (shown is None or shown.id not in run.ids)
            app.typing.run = self.undo_run = run
            app.doc.become(place.text)
            app.doc.move_to(place.caret)
            app.view.follow = app.doc.caret >= app.doc.length
            app.view.document_changed()
            app.view.post_message(DocumentView.Edited(app.view, undoing=True))

    def restore_onto(self, place: Place) -> Node:
        """Where an undo to ``place`` shows its text: the node shown now, when it is the
        writer's node below ``place.node`` and either childless with the text differing
        only inside it (then the undo retypes it in place instead of branching) or the
        text is a start of what is shown (then the undo cuts the path shown, and makes
        no copy of the words kept beside it); else ``place.node``."""
        doc = self.app.doc
        current = doc.node
        text = place.text
        if (
            text is None
            or current is None
            or current is place.node
            or current.origin not in WRITER
            or current.parent is None
            or not place.node.is_ancestor_of(current)
        ):
            return place.node
        if doc.text.startswith(text):
            return current
        if current.children:
            return place.node
        start = doc.end_of(current.parent)
        if start is None or not text.startswith(doc.text[:start]):
            return place.node
        return current

    def redo(self) -> None:
        """Forward again to the place an undo left, passing over archived branches."""
        place = self.step(self.app.history.redo, self.app.history.undo)
        if place is None:
            self.app.notify("Nothing to redo", timeout=2)
            return
        self.go_back_to(place)

    def caret_place(self) -> str:
        """``sibling 2 of 4 · depth 1`` for the branch at the caret ("" at the start)."""
        node = self.caret_node()
        if node is None or node.parent is None:
            return ""
        index, count, depth = place_of(node, self.app.branches.show_hidden)
        return f"sibling {index} of {count} \u00b7 depth {depth}"
