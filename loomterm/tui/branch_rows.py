"""The branch pane's rows, without Textual: which nodes a row holds, how deep it sits,
and the whole layout of the pane from the tree (:func:`lay_out`).

Runs of single children are folded into one row (a :class:`Chain`), so depth in the
pane is the number of branch points, not of nodes. A bookmarked, rated or archived node
is never folded away: the run is split there and the node heads the next row. Archived
(hidden) branches are left out unless asked for, and a :class:`RowFilter` (the rating
filter) may leave out more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from loomterm.tree import Node, rating_of


@dataclass(frozen=True)
class Chain:
    """One row: ``first`` and its single-child descendants down to ``last``."""

    first: Node
    last: Node

    def nodes(self) -> list[Node]:
        out: list[Node] = []
        node: Node | None = self.last
        while node is not None:
            out.append(node)
            if node is self.first:
                break
            node = node.parent
        out.reverse()
        return out


@dataclass
class Row:
    """A row of the pane: a chain, its depth (branch points above it), its branches."""

    chain: Chain
    depth: int
    kids: int
    last: bool  # the last of its siblings (└ rather than ├)
    collapsed: bool = False
    count: int = 1  # nodes in the row's chain (a folded run shows how many)
    continued: bool = False  # goes on from the row above (an unfolded run, a split)
    fold_key: int = -1  # in an unfolded run: its first node's id (left folds it back)
    preview: str = field(default="", compare=False)
    preview_len: int = field(default=-1, compare=False)
    preview_full: bool = field(default=False, compare=False)  # more text cannot change it
    tail: str = field(default="", compare=False)  # a folded run's last words


def is_hidden(node: Node) -> bool:
    return bool(node.meta.get("hidden"))


def is_unread(node: Node) -> bool:
    """A branch the model wrote that the writer has not been to (``meta["unread"]``,
    also loomsidian's mark; see ``tui.controllers.unread``)."""
    return bool(node.meta.get("unread"))


def visible_children(
    node: Node, show_hidden: bool, keep: Callable[[Node], bool] | None = None
) -> list[Node]:
    if keep is None:  # the usual case, kept short: a rebuild asks once per node
        if show_hidden:
            return list(node.children)
        return [child for child in node.children if not child.meta.get("hidden")]
    return [
        child for child in node.children if (show_hidden or not is_hidden(child)) and keep(child)
    ]


def chain_rating(chain: Chain) -> int | None:
    """The row's rating: its first node's (a run is split before a rated node, so no
    other node of the row is rated; asked on every draw, so it walks nothing)."""
    return rating_of(chain.first)


def is_marked(node: Node) -> bool:
    """A node a run is never folded over: bookmarked, rated or archived."""
    meta = node.meta
    if not meta:
        return False
    return bool(meta.get("bookmark") or meta.get("hidden")) or rating_of(node) is not None


def run_from(
    node: Node, show_hidden: bool, keep: Callable[[Node], bool] | None = None
) -> tuple[list[Node], list[Node]]:
    """The nodes of the row starting at ``node`` (follow while there is exactly one
    child, stopping before a marked child: it heads the next row, so its mark stays in
    sight), and the visible children of its last node. One walk: the pane's rebuild is
    this, once per node."""
    nodes = [node]
    while True:
        kids = visible_children(nodes[-1], show_hidden, keep)
        if len(kids) != 1 or is_marked(kids[0]):
            return nodes, kids
        nodes.append(kids[0])


def chain_from(node: Node, show_hidden: bool, keep: Callable[[Node], bool] | None = None) -> Chain:
    """The row starting at ``node`` (see :func:`run_from`)."""
    nodes, _ = run_from(node, show_hidden, keep)
    return Chain(node, nodes[-1])


class RowFilter(Protocol):
    """Which rows the pane shows (the rating filter): a test per node, and why a node
    that does not pass the filter is shown anyway ("" when it passes)."""

    def __call__(self, node: Node) -> bool: ...

    def why_shown(self, node: Node) -> str: ...


def lay_out(
    root: Node,
    show_hidden: bool,
    keep: RowFilter | None,
    collapsed: set[int],
    unfolded: set[int],
) -> tuple[list[Row], dict[int, int]]:
    """Every row of the pane under ``root`` (its own row first), and each shown node's
    row index. ``collapsed``: first-node ids of folded branch points (their branches
    left out); ``unfolded``: first-node ids of runs shown a node a row."""
    rows: list[Row] = [
        Row(Chain(root, root), 0, len(visible_children(root, show_hidden, keep)), True)
    ]
    entries: dict[int, int] = {root.id: 0}
    stack: list[tuple[Node, int, bool, bool]] = []  # first node, depth, last, continued
    kids = visible_children(root, show_hidden, keep)
    for i, child in reversed(list(enumerate(kids))):
        stack.append((child, 1, i == len(kids) - 1, False))
    while stack:
        first, depth, last, continued = stack.pop()
        nodes, kids = run_from(first, show_hidden, keep)
        chain = Chain(first, nodes[-1])
        # One visible child: the run was split before a marked node, which goes on
        # in the next row at the same depth (not a branch point: nothing to fold).
        split = len(kids) == 1
        branches = 0 if split else len(kids)
        folded = first.id in collapsed and branches > 0
        if len(nodes) > 1 and first.id in unfolded:
            for i, node in enumerate(nodes):
                entries[node.id] = len(rows)
                end = i == len(nodes) - 1
                rows.append(
                    Row(
                        Chain(node, node),
                        depth,
                        branches if end else 0,
                        last,
                        folded if end else False,
                        continued=continued or i > 0,
                        fold_key=first.id,
                    )
                )
        else:
            index = len(rows)
            rows.append(Row(chain, depth, branches, last, folded, len(nodes), continued))
            for node in nodes:
                entries[node.id] = index
        if split:
            stack.append((kids[0], depth, last, True))
        elif not folded:
            for i in range(len(kids) - 1, -1, -1):
                stack.append((kids[i], depth + 1, i == len(kids) - 1, False))
    return rows, entries
