"""Tidying the tree from the editor: split a node at the caret, merge a node into its
parent, move a branch elsewhere. Each is a :class:`Change` the undo history keeps
(``history.Place.change``): undo reverts it, redo applies it again, both through the
engine (``Loom.split``, ``merge``, ``unmerge``, ``move``), so each step is recorded in
the session like any other change, and the same node objects (same ids) come back.

No Textual here: the functions run in the editor's worker thread and return what the
app shows next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loomterm.errors import InputError
from loomterm.tree import Merged, Node

if TYPE_CHECKING:
    from loomterm.engine import Loom


@dataclass
class Split:
    """``tail`` was cut after ``offset`` tokens; ``head`` holds its front."""

    head: Node
    tail: Node
    record: Merged | None = None  # set by an undo (a merge), for the redo

    label = "split"

    def undo(self, loom: Loom) -> None:
        self.record = loom.merge(self.tail)

    def redo(self, loom: Loom) -> None:
        assert self.record is not None, "redo before undo"
        loom.unmerge(self.record)


@dataclass
class Merge:
    """A node took in its parent (``record``)."""

    record: Merged

    label = "merge"

    def undo(self, loom: Loom) -> None:
        loom.unmerge(self.record)

    def redo(self, loom: Loom) -> None:
        self.record = loom.merge(self.record.node)


@dataclass
class Archive:
    """``branch`` was archived (hidden): undo brings it back, redo hides it again."""

    branch: Node

    label = "archive"

    def undo(self, loom: Loom) -> None:
        loom.set_meta(self.branch, hidden=None)

    def redo(self, loom: Loom) -> None:
        loom.set_meta(self.branch, hidden=True)


@dataclass
class Move:
    """``node`` went from ``old_parent`` (at ``old_index``) to ``new_parent``; ``split``
    is the cut that made ``new_parent`` at the caret, if there was one."""

    node: Node
    old_parent: Node
    old_index: int
    new_parent: Node
    split: Split | None = None

    label = "move"

    def undo(self, loom: Loom) -> None:
        loom.move(self.node, self.old_parent, self.old_index)
        if self.split is not None:
            self.split.undo(loom)

    def redo(self, loom: Loom) -> None:
        if self.split is not None:
            self.split.redo(loom)
        loom.move(self.node, self.new_parent)


Change = Split | Merge | Move


def split_at(loom: Loom, node: Node, position: int) -> Split:
    """Cut the node holding path position ``position`` of ``node``'s path there (the
    caret's token boundary)."""
    if not 0 < position < node.end:
        raise InputError("the caret is at the start or the end: there is nothing to split")
    holder, offset = loom.tree.locate(node, position)
    if offset == 0:
        raise InputError("a node already begins at the caret")
    head = loom.split(holder, offset)
    return Split(head, holder)


def merge_into_parent(loom: Loom, node: Node) -> Merge:
    """Merge ``node`` into its parent (``Loom.merge``; one-line errors otherwise)."""
    return Merge(loom.merge(node))


def move_here(loom: Loom, branch: Node, node: Node, position: int) -> Move:
    """Move ``branch`` (a node and its subtree) to hang at path position ``position`` of
    ``node``'s path, cutting a node there when the caret is inside one."""
    if branch.parent is None:
        raise InputError("the start of the document cannot move")
    if loom.tree.nodes.get(branch.id) is not branch:
        raise InputError("the branch picked up is no longer in the tree")
    holder, offset = loom.tree.locate(node, max(0, position - 1)) if position else (loom.root, 0)
    target = holder if position else loom.root
    if branch.is_ancestor_of(target):
        raise InputError("a branch cannot move below itself: put the caret outside it")
    split = None
    if position and offset + 1 < len(holder.tokens):
        split = split_at(loom, holder, holder.start + offset + 1)
        target = split.head
    if branch.parent is target:
        if split is not None:
            split.undo(loom)
        raise InputError("the branch already hangs here")
    old_parent, old_index = loom.move(branch, target)
    return Move(branch, old_parent, old_index, target, split)
