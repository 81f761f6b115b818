"""Tidying the tree: split a node at a token, merge a node into its parent (and undo
it), move a branch under another parent; socketteer/loom's three, each recorded (the
events ``split``, ``merge``, ``move``), undoable, and keeping the KV that stays valid.

Mixed into :class:`~loomterm.engine.loom.facade.Loom` (which holds the tree, the runners, the
lock and the events); the tree work itself is ``Tree.split``/``merge``/``move`` and
``engine.kv.tidy``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomterm.engine.events import Event
from loomterm.engine.kv import tidy as kv_tidy
from loomterm.errors import EditRangeError, InputError

if TYPE_CHECKING:
    from loomterm.tree import Merged, Node, Tree


class LoomTidy:
    """``split``, ``merge``, ``unmerge`` and ``move``, for the Loom."""

    tree: Tree
    _events: Any
    _cursor: Node

    def split(self, node: Node, offset: int) -> Node:
        """Cut ``node`` after its first ``offset`` tokens (``Tree.split``): returns the
        new head; ``node`` keeps its id and the rest. The halves share the KV; nothing
        is computed."""
        with self.exclusive():
            self._check_node(node)
            if node.parent is None or not 0 < offset < len(node.tokens):
                raise EditRangeError(
                    f"offset {offset} does not cut node {node.id} (1..{len(node.tokens) - 1})"
                )
            head = self.tree.split(node, offset)
            for runner in self._each_runner():
                runner.split(head, node, offset)
            self._events.emit(Event.SPLIT, head)
            return head

    def merge(self, node: Node) -> Merged:
        """Fold ``node``'s parent into ``node`` (``Tree.merge``; ``node`` must be an only
        child): one node holds both halves' tokens, their KV joined when both have it.
        Returns the record :meth:`unmerge` takes. The cursor on the parent moves to
        ``node``. Emits ``merge`` with ``node`` (the parent is gone from the tree)."""
        with self.exclusive():
            self._check_node(node)
            head = node.parent
            if head is None or head.parent is None:
                raise InputError("this node has no parent to merge into (the root is above it)")
            if len(head.children) != 1:
                raise InputError(
                    f"the parent has {len(head.children)} branches: only an only child "
                    "merges into its parent (move the others first)"
                )
            # The working cache names the halves: it forgets them (their KV stays on
            # the nodes, copied out of the buffer first) and reloads the merged node.
            for runner in self._each_runner():
                runner.forget(head)
            join = kv_tidy.join_kv if self.kv_owner is not None else None
            record = self.tree.merge(node, join)
            self._events.emit(Event.MERGE, node)
            if self._cursor is head:
                self.cursor = node
            return record

    def unmerge(self, record: Merged) -> Node:
        """Undo :meth:`merge`: the same parent node (same id) comes back, holding its
        tokens again, the KV divided as a split divides it. Returns it."""
        with self.exclusive():
            self._check_node(record.node)
            for runner in self._each_runner():
                runner.forget(record.node)
            try:
                head = self.tree.unmerge(record)
            except ValueError as exc:
                raise InputError(str(exc)) from None
            self._events.emit(Event.SPLIT, head)
            return head

    def move(self, node: Node, new_parent: Node, index: int | None = None) -> tuple[Node, int]:
        """Make ``node`` and its subtree a child of ``new_parent`` (at ``index`` among
        its children; default last). The subtree keeps its KV only when the path
        above stays the same tokens; otherwise its KV and records are dropped and
        computed in the new context when used (``engine.kv.tidy``). Returns the
        old ``(parent, index)`` (a second ``move`` there undoes it). Emits ``move``."""
        with self.exclusive():
            self._check_node(node)
            self._check_node(new_parent)
            old_parent = node.parent
            if old_parent is None:
                raise InputError("the root cannot move")
            if node.is_ancestor_of(new_parent):
                raise InputError("a branch cannot move below itself")
            keep = kv_tidy.same_context(old_parent, new_parent)
            if not keep:
                for runner in self._each_runner():
                    runner.forget(node)
            old = self.tree.move(node, new_parent, index)
            self._events.emit(Event.MOVE, node)
            if not keep:
                for item in kv_tidy.drop_context(node):
                    self._events.emit(Event.RECORDS, item)
                    self._events.emit(Event.UPDATE, item)
            return old
