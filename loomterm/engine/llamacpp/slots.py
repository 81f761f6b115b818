"""Which llama.cpp sequence holds which path: the runner's bookkeeping, pure Python.

A :class:`Slot` is one llama.cpp sequence id and what its cells hold, by position: the
token, and who owns the cell's KV. An exact cell (owner None) depends only on the
tokens up to it, so any path with those tokens may reuse it. An approximate cell (moved
by a fast splice, or computed after one) belongs to the node it was made for, and only
a path through that node reuses it. After an approximate cell every later cell of a
slot is approximate too.

Cells are shared between slots only through ``seq_cp`` of a prefix, so two slots that
share the cell at position ``p`` agree on every token up to ``p``: that is what
:func:`may_share` tests before cells are moved (``seq_add`` moves a shared cell for
every sequence that holds it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class Want:
    """The sequence a path asks for.

    Attributes:
        tokens: The token at each position.
        ids: The node id holding each position (plain paths; empty otherwise).
        approx: Whether that node is flagged approximate (plain paths).
        plain: True when positions are path positions (no window shift, no injected
            context), so cells can be tied to nodes.
    """

    tokens: list[int]
    ids: list[int] = field(default_factory=list)
    approx: list[bool] = field(default_factory=list)
    plain: bool = True

    @classmethod
    def cells(cls, tokens: list[int], owners: list[int | None]) -> Want:
        """A want that these cells serve whole (their approximate owners included)."""
        ids = [owner if owner is not None else -1 for owner in owners]
        return cls(list(tokens), ids, [owner is not None for owner in owners])

    def owner_ok(self, position: int, owner: int | None) -> bool:
        """Whether a cell owned by ``owner`` may stand at ``position`` of this path."""
        if owner is None:
            return True
        return self.plain and self.approx[position] and self.ids[position] == owner


@dataclass
class Slot:
    """One llama.cpp sequence and what it holds (see the module docstring).

    Attributes:
        seq: The llama.cpp sequence id.
        tokens: The token at each position ``0..len-1``.
        owners: Per position, None (exact) or the node id owning approximate KV.
        logits: The (V,) logits after the last token, when known.
        used: When it was last used (a counter; least recently used is evicted first).
    """

    seq: int
    tokens: list[int] = field(default_factory=list)
    owners: list[int | None] = field(default_factory=list)
    logits: torch.Tensor | None = None
    used: int = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def cut(self, length: int) -> None:
        """Forget positions ``length..`` (the caller removes the cells)."""
        if length < len(self.tokens):
            del self.tokens[length:], self.owners[length:]
            self.logits = None

    def extend(self, tokens: Sequence[int], owners: Sequence[int | None]) -> None:
        self.tokens.extend(tokens)
        self.owners.extend(owners)
        self.logits = None

    def approx_before(self, position: int) -> bool:
        """Whether any cell before ``position`` is approximate."""
        return any(owner is not None for owner in self.owners[:position])

    def copy_to(self, other: Slot, length: int) -> None:
        """``other``'s record after ``seq_cp`` of this slot's first ``length`` cells."""
        other.tokens = self.tokens[:length]
        other.owners = self.owners[:length]
        other.logits = self.logits if length == len(self.tokens) else None


def matched(slot: Slot, want: Want) -> int:
    """How many leading positions of ``want`` the slot's cells can serve."""
    limit = min(len(slot.tokens), len(want.tokens))
    tokens, owners = slot.tokens, slot.owners
    i = 0
    while i < limit and tokens[i] == want.tokens[i] and want.owner_ok(i, owners[i]):
        i += 1
    return i


def may_share(a: Slot, b: Slot, position: int) -> bool:
    """Whether ``a`` and ``b`` may share cells at ``position`` and after: they agree on
    every token up to it (sharing only ever comes from copying a prefix)."""
    if len(a.tokens) <= position or len(b.tokens) <= position:
        return False
    return a.tokens[: position + 1] == b.tokens[: position + 1]


def cells_held(slots: list[Slot]) -> int:
    """Cells ``slots`` hold (a prefix shared by ``seq_cp`` counted once)."""
    cells = 0
    seen: list[Slot] = []
    for slot in sorted((s for s in slots if s.tokens), key=len, reverse=True):
        shared = max((_common(slot, other) for other in seen), default=0)
        cells += len(slot) - shared
        seen.append(slot)
    return cells


def _common(a: Slot, b: Slot) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a.tokens[i] == b.tokens[i]:
        i += 1
    return i
