"""Where a node stands among the branches the user sees: the first node of its branch,
its siblings, and its place (``sibling 2 of 4 · depth 1``). Pure reads of the tree."""

from __future__ import annotations

from loomterm.tree import Node
from loomterm.tui.branch_rows import is_hidden, visible_children


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
