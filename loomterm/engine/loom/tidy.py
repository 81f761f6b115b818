"""Tidying the tree: split a node at a token, merge a node into its parent (and undo
it), move a branch under another parent; socketteer/loom's three, each recorded (the
events ``split``, ``merge``, ``move``), undoable, and keeping the KV that stays valid.

A part the :class:`~loomterm.engine.loom.facade.Loom` holds and delegates to; it owns
no state and reaches the Loom only through the public :class:`TidyHost` (the tree, the
cursor, the runners, the lock, the change notices). The tree work itself is
``Tree.split``/``merge``/``move`` and ``engine.kv.tidy``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Protocol

from loomterm.engine.events import Event
from loomterm.engine.kv import tidy as kv_tidy
from loomterm.errors import EditRangeError, InputError
from loomterm.tree import merge_problem

if TYPE_CHECKING:
    from loomterm.engine.runner import Runner
    from loomterm.tree import Merged, Node, Tree


class TidyHost(Protocol):
    """What tidying needs of the Loom: all of it public."""

    tree: Tree
    cursor: Node

    @property
    def kv_owner(self) -> str | None: ...

    @property
    def models(self) -> dict[str, Runner]: ...

    def exclusive(self) -> contextlib.AbstractContextManager: ...

    def check_node(self, node: Node) -> None: ...

    def notify(self, event: Event, node: Node | None) -> None: ...


class LoomTidy:
    """``split``, ``merge``, ``unmerge`` and ``move``, for the Loom (``loom``)."""

    def __init__(self, loom: TidyHost) -> None:
        self.loom = loom

    def _each_runner(self) -> list[Runner]:
        return list(self.loom.models.values())

    def split(self, node: Node, offset: int) -> Node:
        """Cut ``node`` after its first ``offset`` tokens (``Tree.split``): returns the
        new head; ``node`` keeps its id and the rest. The halves share the KV; nothing
        is computed."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            if node.parent is None or not 0 < offset < len(node.tokens):
                raise EditRangeError(
                    f"offset {offset} does not cut node {node.id} (1..{len(node.tokens) - 1})"
                )
            head = self.loom.tree.split(node, offset)
            for runner in self._each_runner():
                runner.split(head, node, offset)
            self.loom.notify(Event.SPLIT, head)
            return head

    def merge(self, node: Node) -> Merged:
        """Fold ``node``'s parent into ``node`` (``Tree.merge``; ``node`` must be an only
        child): one node holds both halves' tokens, their KV joined when both have it.
        Returns the record :meth:`unmerge` takes. The cursor on the parent moves to
        ``node``. Emits ``merge`` with ``node`` (the parent is gone from the tree)."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            problem = merge_problem(node)
            if problem is not None:
                raise InputError(problem)
            head = node.parent
            # The working cache names the halves: it forgets them (their KV stays on
            # the nodes, copied out of the buffer first) and reloads the merged node.
            for runner in self._each_runner():
                runner.forget(head)
            join = kv_tidy.join_kv if self.loom.kv_owner is not None else None
            record = self.loom.tree.merge(node, join)
            self.loom.notify(Event.MERGE, node)
            if self.loom.cursor is head:
                self.loom.cursor = node
            return record

    def unmerge(self, record: Merged) -> Node:
        """Undo :meth:`merge`: the same parent node (same id) comes back, holding its
        tokens again, the KV divided as a split divides it. Returns it."""
        with self.loom.exclusive():
            self.loom.check_node(record.node)
            for runner in self._each_runner():
                runner.forget(record.node)
            try:
                head = self.loom.tree.unmerge(record)
            except ValueError as exc:
                raise InputError(str(exc)) from None
            self.loom.notify(Event.SPLIT, head)
            return head

    def move(self, node: Node, new_parent: Node, index: int | None = None) -> tuple[Node, int]:
        """Make ``node`` and its subtree a child of ``new_parent`` (at ``index`` among
        its children; default last). The subtree keeps its KV only when the path
        above stays the same tokens; otherwise its KV and records are dropped and
        computed in the new context when used (``engine.kv.tidy``). Returns the
        old ``(parent, index)`` (a second ``move`` there undoes it). Emits ``move``."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            self.loom.check_node(new_parent)
            old_parent = node.parent
            if old_parent is None:
                raise InputError("the root cannot move")
            if node.is_ancestor_of(new_parent):
                raise InputError("a branch cannot move below itself")
            keep = kv_tidy.same_context(old_parent, new_parent)
            if not keep:
                for runner in self._each_runner():
                    runner.forget(node)
            old = self.loom.tree.move(node, new_parent, index)
            self.loom.notify(Event.MOVE, node)
            if not keep:
                for item in kv_tidy.drop_context(node):
                    self.loom.notify(Event.RECORDS, item)
                    self.loom.notify(Event.UPDATE, item)
            return old
