"""Branches evicted from llama.cpp's cache, kept off it as copies of their cells, under
the KV budget.

When the cache needs a sequence or cells for another path, the least recently used
sequence leaves it. Instead of losing its KV, the runner copies its cells out
(``llama_state_seq_get_data``, ``LlamaContext.seq_save``) and parks the copy here with
what it held (a :class:`~loomterm.engine.llamacpp.slots.Slot` record: tokens and who
owns approximate cells). Coming back to that branch puts the copy back into a free
sequence (``llama_state_seq_set_data``): a memory copy instead of evaluating the tokens
again, and the same cells, so the same logits.

The copies are this runner's node KV: they count as ``KVBytes.nodes``, against the same
``--kv-budget`` as the torch runner's node KV, beside the context's own cells (allocated
whole when the context is made, the part the budget pins, as the torch runner's working
buffer). What does not fit goes least recently used first, and coming back to a branch
whose copy went evaluates it again, exactly.

A record can be cut (a node forgotten, a tree replaced) without touching the bytes: the
cells past its length are dropped right after the copy is put back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loomterm.engine.llamacpp.slots import Slot, Want, matched

PARK_MIN = 32  # shorter sequences are evaluated again rather than parked


@dataclass
class Parked:
    """One sequence's cells kept off the context.

    Attributes:
        record: What the cells hold (``seq`` is -1: no sequence holds them).
        data: ``llama_state_seq_get_data``'s bytes.
        used: When its branch was last used (the runner's clock).
        cells: Cells the copy takes when put back (its length when parked).
    """

    record: Slot
    data: bytes
    used: int
    cells: int


class ParkedStore:
    """Parked copies within ``room`` bytes, least recently used dropped first.

    Attributes:
        room: Bytes the copies may take (the budget less the context's cells).
        items: The copies, in no order.
        dropped: Copies dropped to keep within ``room``.
    """

    def __init__(self, room: int) -> None:
        self.room = max(0, room)
        self.items: list[Parked] = []
        self.dropped = 0

    @property
    def nbytes(self) -> int:
        """Bytes the copies take."""
        return sum(len(item.data) for item in self.items)

    def covers(self, tokens: list[int], owners: list[int | None]) -> bool:
        """Whether a copy already holds these cells (so parking them again adds nothing)."""
        want = Want.cells(tokens, owners)
        return any(matched(item.record, want) == len(tokens) for item in self.items)

    def park(self, record: Slot, data: bytes, used: int) -> bool:
        """Keep ``data`` for ``record``; False when it alone exceeds ``room``. Older
        copies go until the rest fits."""
        if len(data) > self.room:
            return False
        self.items.append(Parked(record, data, used, len(record)))
        total = self.nbytes
        for item in sorted(self.items, key=lambda i: i.used):
            if total <= self.room:
                break
            self.items.remove(item)
            total -= len(item.data)
            self.dropped += 1
        return True

    def best(self, want: Want) -> tuple[Parked | None, int]:
        """The copy serving the longest prefix of ``want``, and that length."""
        found, longest = None, 0
        for item in self.items:
            m = matched(item.record, want)
            if m > longest:
                found, longest = item, m
        return found, longest

    def take(self, item: Parked) -> None:
        """``item`` is back in the context: it leaves the store."""
        self.items.remove(item)

    def cut_owned(self, node_id: int) -> None:
        """Cut each record before its first cell owned by ``node_id`` (a forgotten node)."""
        for item in list(self.items):
            owners = item.record.owners
            first = next((p for p, owner in enumerate(owners) if owner == node_id), None)
            if first is not None:
                self._cut(item, first)

    def cut_approx(self) -> None:
        """Cut each record before its first approximate cell (a new tree: approximate
        cells belonged to the old tree's nodes)."""
        for item in list(self.items):
            owners = item.record.owners
            first = next((p for p, owner in enumerate(owners) if owner is not None), None)
            if first is not None:
                self._cut(item, first)

    def rename(self, old: int, new: int, before: int) -> None:
        """Cells owned by ``old`` at positions below ``before`` now belong to ``new``."""
        for item in self.items:
            owners = item.record.owners
            for p in range(min(before, len(owners))):
                if owners[p] == old:
                    owners[p] = new

    def _cut(self, item: Parked, length: int) -> None:
        if length == 0:
            self.items.remove(item)
        else:
            item.record.cut(length)


def park(store: ParkedStore, slot: Slot, slots: list[Slot], save: Callable[[int], bytes]) -> None:
    """Copy ``slot``'s cells off the context (``save``: ``LlamaContext.seq_save``) into
    ``store``, unless they are short, held by another of ``slots`` or a copy already, or
    larger than the budget leaves."""
    if len(slot) < PARK_MIN or store.room == 0:
        return
    mine = Want.cells(slot.tokens, slot.owners)
    held = any(s is not slot and matched(s, mine) == len(slot) for s in slots)
    if held or store.covers(slot.tokens, slot.owners):
        return
    record = Slot(-1, list(slot.tokens), list(slot.owners), used=slot.used)
    store.park(record, save(slot.seq), slot.used)
