"""A node's parts by author: what an export marks as typed, generated or edited.

A node merged by the tree tools (``Tree.merge``: the editor's merge, tidying a chain)
keeps who wrote which of its tokens in ``meta["merged_origins"]``
(:func:`loomterm.tree.origin_runs`). An export that tells the user's text from the
model's reads a node as these parts, so a merged node looks as its parts did before
the merge; any other node is one part.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomterm.store import SessionData
from loomterm.tree import Node, Origin, origin_runs


@dataclass(frozen=True)
class Part:
    """Tokens ``start`` to ``stop`` of ``node``, all written by ``origin``.

    Attributes:
        node: The node (its meta, records and id are the part's too).
        origin: Who wrote these tokens.
        start, stop: The token range in ``node``.
        text: Their display text (``SessionData.pieces``).
    """

    node: Node
    origin: Origin
    start: int
    stop: int
    text: str

    @property
    def first(self) -> bool:
        """The node's first part (its bookmark and summary label go there)."""
        return self.start == 0


def parts(data: SessionData, node: Node) -> list[Part]:
    """``node`` as runs of one author, in order (one part for an unmerged node; none
    for a node without tokens)."""
    pieces = data.pieces.get(node.id, [])
    out: list[Part] = []
    start = 0
    for count, origin in origin_runs(node):
        stop = start + count
        out.append(Part(node, _origin(origin, node), start, stop, "".join(pieces[start:stop])))
        start = stop
    return out


def _origin(value: str, node: Node) -> Origin:
    try:
        return Origin(value)
    except ValueError:  # a name this version does not know: the node's own
        return Origin(node.origin)
