"""The context window: which tokens of a long path the model sees.

Past ``n_ctx`` tokens the model sees the first ``n_keep`` tokens and the most recent
rest, shifted in blocks of ``n_discard`` as llama.cpp's context shift does, so the
window moves rarely and the kept prefix's KV stays valid between moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loomterm.engine.kv.cache import Segment
from loomterm.tree import Node

MIN_CTX = 16


@dataclass(frozen=True)
class Window:
    """The window geometry: ``n_ctx`` columns, the first ``n_keep`` always kept."""

    n_ctx: int
    n_keep: int
    n_discard: int

    @classmethod
    def for_context(cls, n_ctx: int) -> Window:
        """llama.cpp's defaults scaled to the window: keep up to 64, drop half the rest."""
        n_keep = min(64, n_ctx // 4)
        return cls(n_ctx, n_keep, max(1, (n_ctx - n_keep) // 2))

    def shift_for(self, total: int) -> int:
        """How many tokens after ``n_keep`` the window skips for a path of ``total``."""
        if total <= self.n_ctx:
            return 0
        return math.ceil((total - self.n_ctx) / self.n_discard) * self.n_discard

    def layout(self, node: Node) -> list[Segment]:
        """Which (node, lo, hi) pieces fill the model's window for ``node``'s path."""
        total = node.end
        shift = self.shift_for(total)
        pieces = segments(node, 0, min(self.n_keep, total)) if shift else []
        pieces += segments(node, self.n_keep + shift if shift else 0, total)
        return [Segment(n, lo, hi) for n, lo, hi in pieces]


def segments(node: Node, start: int, end: int) -> list[tuple[Node, int, int]]:
    """The (node, lo, hi) pieces of ``node``'s path covering positions [start, end)."""
    out = []
    pos = 0
    for item in node.path():
        lo, hi = max(start, pos) - pos, min(end, pos + len(item.tokens)) - pos
        if lo < hi:
            out.append((item, lo, hi))
        pos += len(item.tokens)
    return out
