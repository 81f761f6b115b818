"""One verifying forward pass of drafted decoding: lookahead decoding's Jacobi window
and n-gram pool (:class:`Lookahead`), and the block (:class:`Block`) that lays the
window and the draft tree (``decode.draft_tree.DraftTree``) out with the mask under
which they see each other. ``decode.draft_tree``'s docstring tells the method.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from loomterm.engine.decode.draft_tree import DraftTree


# -- lookahead decoding ---------------------------------------------------------------
class Lookahead:
    """Lookahead decoding's Jacobi window and n-gram pool.

    The window has ``N - 1`` levels of ``W`` slots. Slot 0 of level 0 is the token being
    fed (the draft root); level ``j`` slot ``i`` sits ``j + i`` positions after it and
    sees the root, level 0's slots ``1..i`` and its own column's slots of levels
    ``1..j`` -- each column is a short causal chain. The last level's outputs become the
    next last level; every column, with its new output, is an ``N``-gram for the pool.
    """

    def __init__(self, window: int, ngram: int, guesses: int, seed_tokens: list[int]) -> None:
        if ngram < 3 or window < 1:
            raise ValueError("lookahead needs ngram >= 3 and window >= 1")
        self.window, self.ngram, self.guesses = window, ngram, guesses
        rng = random.Random(0)  # fixed: drafts never change the output, only the speed
        pick = seed_tokens or [0]
        self.levels = [[rng.choice(pick) for _ in range(window)] for _ in range(ngram - 1)]
        self.pool: dict[int, list[tuple[int, ...]]] = {}

    # The block layout: level 0 slots 1..W-1 and levels 1..N-3 come first (their logits
    # are not needed), the draft tree next, then the last level (its logits are).
    def early_tokens(self) -> list[tuple[int, int, int]]:
        """(level, slot, token) of every window token before the draft tree."""
        out = [(0, i, self.levels[0][i]) for i in range(1, self.window)]
        for level in range(1, self.ngram - 2):
            out += [(level, i, self.levels[level][i]) for i in range(self.window)]
        return out

    def last_tokens(self) -> list[tuple[int, int, int]]:
        """(level, slot, token) of the last level, whose outputs are the new guesses."""
        last = self.ngram - 2
        return [(last, i, self.levels[last][i]) for i in range(self.window)]

    def candidates(self, token: int) -> list[tuple[int, ...]]:
        """Pool n-grams (less their first token) that start with ``token``."""
        return self.pool.get(int(token), [])

    def update(self, root: int, outputs: list[int], accepted: int) -> None:
        """After a step: collect each column's n-gram, then shift the window one level.
        ``outputs``: the model's token for each last-level slot; ``accepted``: drafts
        accepted this step (then the window is stale and refilled from level 0, as
        llama.cpp does)."""
        levels = self.levels
        levels[0][0] = int(root)
        for i in range(self.window):
            gram = tuple(levels[j][i] for j in range(1, self.ngram - 1)) + (int(outputs[i]),)
            self._remember(levels[0][i], gram)
        first = list(levels[0])
        for j in range(self.ngram - 2):
            levels[j] = list(levels[j + 1])
        levels[-1] = [int(t) for t in outputs] if accepted == 0 else first

    def _remember(self, first: int, gram: tuple[int, ...]) -> None:
        kept = self.pool.setdefault(int(first), [])
        if gram in kept:
            return
        kept.append(gram)
        if len(kept) > self.guesses:
            del kept[0]  # the oldest goes


# -- one verification block -----------------------------------------------------------
@dataclass
class Block:
    """The tokens of one verifying forward pass and how they see each other.

    ``ids``, ``offsets`` (position minus the current length) and ``mask`` (q, q; True =
    may attend) cover, in order: the early lookahead tokens, the draft tree (root
    first), the last lookahead level. ``keep`` trailing positions return logits.
    ``mask`` is None when plain causal order is right (a single chain).
    """

    ids: list[int]
    offsets: list[int]
    mask: torch.Tensor | None
    tree_start: int  # block index of the draft root
    tree_size: int
    keep: int


def build_block(tree: DraftTree, lookahead: Lookahead | None) -> Block:
    """Lay out ``tree`` (and the lookahead window, if any) for one forward pass."""
    n = len(tree)
    early = lookahead.early_tokens() if lookahead is not None else []
    last = lookahead.last_tokens() if lookahead is not None else []
    e, w = len(early), len(last)
    q = e + n + w
    ids = [t for _, _, t in early] + tree.tokens + [t for _, _, t in last]
    offsets = [lvl + i for lvl, i, _ in early] + tree.depths + [lvl + i for lvl, i, _ in last]
    if lookahead is None and tree.is_chain():
        return Block(ids, offsets, None, 0, n, n)
    mask = torch.zeros(q, q, dtype=torch.bool)
    mask[e : e + n, e : e + n] = tree.ancestry()
    if lookahead is not None:
        index = {}  # (level, slot) -> block index
        for b, (lvl, i, _) in enumerate(early):
            index[(lvl, i)] = b
        for b, (lvl, i, _) in enumerate(last):
            index[(lvl, i)] = e + n + b
        for (lvl, i), b in index.items():
            mask[b, e] = True  # the root is level 0, slot 0
            for s in range(1, i + 1):
                mask[b, index[(0, s)]] = True
            for m in range(1, lvl + 1):
                mask[b, index[(m, i)]] = True
    return Block(ids, offsets, mask, e, n, n + w)
