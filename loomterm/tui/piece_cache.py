"""Token pieces for the document (``tui.document``): each token's text after a few
tokens of left context, and a cache of decoded nodes so that going back to a branch
costs nothing per token.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from itertools import accumulate

from loomterm.tree import Node

# Tokens of left context that settle a token's text (a UTF-8 character is <= 4 bytes).
PIECE_CONTEXT = 4

TokenBytes = Callable[[int], bytes]


def decode_pieces(
    token_bytes: TokenBytes, tokens: list[int], context: list[int]
) -> tuple[list[str], str]:
    """Pieces of ``tokens`` after ``context``, and the flush of a trailing partial
    character (what ``TokenText.pieces`` adds at the very end)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for token in context:
        decoder.decode(token_bytes(token))
    pieces = [decoder.decode(token_bytes(token)) for token in tokens]
    return pieces, decoder.decode(b"", final=True)


def tokens_before(path: list[Node], index: int) -> list[int]:
    """Up to PIECE_CONTEXT tokens just before ``path[index]``."""
    context: list[int] = []
    i = index - 1
    while i >= 0 and len(context) < PIECE_CONTEXT:
        need = PIECE_CONTEXT - len(context)
        context = path[i].tokens[-need:] + context
        i -= 1
    return context


class PieceCache:
    """Decoded nodes: node id -> (its tokens, left context, pieces, ends, text, flushed
    tail). Cleared whole when it grows past ``LIMIT`` nodes."""

    LIMIT = 20_000

    def __init__(self) -> None:
        self._decoded: dict[
            int, tuple[tuple[int, ...], tuple[int, ...], list[str], list[int], str, str]
        ] = {}

    def decode(
        self, token_bytes: TokenBytes, node: Node, tokens: list[int], context: list[int]
    ) -> tuple[list[str], list[int], str, str]:
        """``node``'s pieces (fresh lists, the caller may change them), their ends, its
        text and the flushed tail, from the cache when the node's tokens and context
        match (the tokens themselves, not their count: a node retyped in place, "a"
        become a line break, keeps its id and its length)."""
        key = (tuple(tokens), tuple(context))
        hit = self._decoded.get(node.id)
        if hit is not None and hit[:2] == key:
            _, _, pieces, ends, text, tail = hit
            return list(pieces), list(ends), text, tail
        pieces, tail = decode_pieces(token_bytes, tokens, context)
        ends = list(accumulate(map(len, pieces)))
        text = "".join(pieces)
        if len(self._decoded) > self.LIMIT:
            self._decoded.clear()
        self._decoded[node.id] = (*key, pieces, ends, text, tail)
        return list(pieces), list(ends), text, tail

    def forget(self, node: Node) -> None:
        """Drop what is kept of ``node`` (its tokens were replaced in place)."""
        self._decoded.pop(node.id, None)
