"""Blocks, the unit the document's text is held in: a run of consecutive tokens of one
node (or of pending typed text) with each token's display piece and where it ends, so
a char maps to its token by bisection and an edit splits a block at the char it cuts.

Also the block *kinds* (who wrote the text), which the document pane styles by.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from loomterm.tree import Node, Origin

# Block kinds: who wrote the text (styles are chosen by kind).
USER = "user"
MODEL = "model"
IMPORT = "import"
PENDING = "pending"  # typed here, not yet handed to the engine


def kind_of(node: Node) -> str:
    if node.origin is Origin.MODEL:
        return MODEL
    if node.origin is Origin.IMPORT:
        return IMPORT
    return USER


class Block:
    """A run of text: some consecutive tokens of one node, or pending typed text.

    Attributes:
        node: The node the tokens belong to (None for pending text).
        first: Index in ``node.tokens`` of the block's first token.
        pieces: Display text per token (a token cut by an edit keeps part of its text).
        ends: Cumulative ``len`` of ``pieces``: token ``j`` spans ``ends[j-1]..ends[j]``.
        kind: USER, MODEL, IMPORT or PENDING.
        role: Chat role of the text (inherited down the path), or None.
        pos0: Path position of the first token (-1 for pending text).
    """

    __slots__ = ("node", "first", "pieces", "ends", "kind", "role", "pos0", "special")

    def __init__(
        self,
        node: Node | None,
        first: int,
        pieces: list[str],
        kind: str,
        role: str | None,
        pos0: int,
        ends: list[int] | None = None,
    ) -> None:
        self.node = node
        self.first = first
        self.pieces = pieces
        self.ends = ends if ends is not None else list(accumulate(map(len, pieces)))
        self.kind = kind
        self.role = role
        self.pos0 = pos0
        self.special: bool | None = None  # holds a special token (worked out when drawn)

    def has_special(self, special_ids: set[int]) -> bool:
        """True when one of the block's tokens is a special token (cached)."""
        if self.special is None:
            node = self.node
            tokens = node.tokens[self.first : self.first + len(self.pieces)] if node else ()
            self.special = not special_ids.isdisjoint(tokens)
        return self.special

    @property
    def length(self) -> int:
        return self.ends[-1] if self.ends else 0

    def token_index(self, offset: int) -> int:
        """Index ``j`` of the token holding char ``offset`` of the block."""
        return bisect_right(self.ends, offset)

    def split(self, offset: int) -> tuple[Block, Block]:
        """Two blocks holding the text before and after ``offset`` (0 < offset < length).
        A token cut in two appears in both, each with its part of the text."""
        j = self.token_index(offset)
        before = self.ends[j - 1] if j else 0
        cut = offset - before
        if cut == 0:
            left_pieces, right_pieces, right_first = self.pieces[:j], self.pieces[j:], j
        else:
            piece = self.pieces[j]
            left_pieces = self.pieces[:j] + [piece[:cut]]
            right_pieces = [piece[cut:]] + self.pieces[j + 1 :]
            right_first = j
        shift = right_first if self.node is not None else 0
        left = Block(self.node, self.first, left_pieces, self.kind, self.role, self.pos0)
        right = Block(
            self.node,
            self.first + shift,
            right_pieces,
            self.kind,
            self.role,
            self.pos0 + shift if self.pos0 >= 0 else -1,
        )
        return left, right
