"""What the tree-tidying operations (move, merge, split) do to cached KV.

A node's KV holds its tokens' keys and values computed after exactly the tokens of the
path above it. Merging two halves of one path changes no position and no context, so
their KV joins by concatenation. Moving a subtree changes the path above it: its KV
stays valid only when the new path above holds the very same tokens (then the
positions and the context are the same); otherwise it is dropped, with the records
(log-probabilities, alternatives) that came from that context, and computed again in
the new one when the path is next used.
"""

from __future__ import annotations

import torch

from loomterm.engine.kv.cache import kv_len
from loomterm.tree import Node


def join_kv(
    head: torch.Tensor | None, tail: torch.Tensor | None, head_tokens: int
) -> torch.Tensor | None:
    """The KV of a node made of ``head_tokens`` tokens and then the tail's: a node's KV
    covers a prefix of its tokens, so the tail's joins only a complete head's."""
    if head is None or kv_len(head) < head_tokens or tail is None or kv_len(tail) == 0:
        return head
    return torch.cat([head, tail], dim=3)  # (L, 2, H, T_head + T_tail, D)


def same_context(old_parent: Node, new_parent: Node) -> bool:
    """Whether a subtree moved from ``old_parent`` to ``new_parent`` keeps its KV:
    the paths above hold the same tokens (so the same positions and context)."""
    if old_parent.end != new_parent.end:
        return False
    return old_parent.path_tokens() == new_parent.path_tokens()


def drop_context(node: Node) -> list[Node]:
    """Forget what ``node``'s subtree computed in its old context: KV, records, and
    the approximate flag (its recompute will be exact). Returns the nodes changed."""
    changed = []
    for item in node.walk():
        had = (
            item.kv is not None
            or item.approx
            or any(lp is not None for lp in item.logprobs)
            or any(top is not None for top in item.top)
        )
        item.kv = None
        item.approx = False
        item.logprobs = [None] * len(item.tokens)
        item.top = [None] * len(item.tokens)
        if had:
            changed.append(item)
    return changed
