"""The llama.cpp runner's fast splice: a suffix's cells moved, not evaluated again.

A splice the Loom announced (``Runner.moved_kv``) is done on the sequence holding the old
path: the replaced cells are removed (``seq_rm``), the suffix's cells move to their new
positions (``seq_add``: llama.cpp re-rotates their keys) and only the inserted tokens
are evaluated. The old path is kept too, as a real copy of its cells in a free sequence,
where one is free and the cache has room.
"""

from __future__ import annotations

from typing import Protocol

import torch

from loomterm.engine.llamacpp.context import LlamaContext
from loomterm.engine.llamacpp.slots import Slot, Want, matched, may_share
from loomterm.tree import Node


class SpliceHost(Protocol):
    """What the fast splice uses of the llama.cpp runner (it never imports it)."""

    llama: LlamaContext
    slots: list[Slot]
    clock: int  # a step counter: a slot's ``used`` orders eviction
    kept_copies: int  # old paths kept whole across a fast splice

    def want(self, node: Node, reserve: int = 0) -> Want: ...

    def free_slot(self, busy: set[int]) -> Slot: ...

    def grow(self, need: int) -> bool: ...

    def cells_in_use(self) -> int: ...


def old_path(runner: SpliceHost, last: Node, total: int) -> Want:
    """The sequence the path through ``last`` asked for, cut to its first ``total``."""
    old = runner.want(last)
    old.tokens, old.ids, old.approx = old.tokens[:total], old.ids[:total], old.approx[:total]
    return old


def fast_splice(
    runner: SpliceHost, moves: list, want: Want, node: Node
) -> tuple[Slot, torch.Tensor] | None:
    """Do the splice the Loom announced (``moved_kv``: ``moves``) on the sequence holding
    the old path: the slot now holding ``want`` and the (V,) logits after it, or None
    (then the path is evaluated exactly)."""
    first, lo0, _, delta = moves[0]
    last, _, hi, _ = moves[-1]
    old_end, old_total = first.start + lo0, last.start + hi
    old = old_path(runner, last, old_total)
    slot = next((s for s in runner.slots if matched(s, old) == old_total), None)
    if slot is None or len(want.tokens) != old_total + delta or node.end != len(want.tokens):
        return None
    if want.tokens[old_end + delta :] != old.tokens[old_end:]:
        return None
    start = min(old_end, old_end + delta)
    while start > 0 and want.tokens[start - 1] != old.tokens[start - 1]:
        start -= 1
    for other in runner.slots:  # nobody else may hold the cells about to move
        if other is not slot and may_share(other, slot, old_end):
            runner.llama.seq_rm(other.seq, old_end)
            other.cut(old_end)
    keep_old_path(runner, slot, old_end)
    llama = runner.llama
    llama.seq_rm(slot.seq, start, old_end)
    llama.seq_rm(slot.seq, old_total - 1)  # the last token is evaluated again: logits
    llama.seq_add(slot.seq, old_end, old_total - 1, delta)
    moved_tokens = old.tokens[old_end : old_total - 1]
    inserted = want.tokens[start : old_end + delta]
    new_end = len(want.tokens)
    slot.used = runner.clock
    slot.tokens = want.tokens[:start]
    slot.owners = slot.owners[:start]
    slot.logits = None
    approx = slot.approx_before(start)
    ins_owners = want.ids[start : old_end + delta] if approx else [None] * len(inserted)
    if inserted:
        insert(runner, slot, want, start, len(inserted))
    slot.extend(inserted, ins_owners)
    slot.extend(moved_tokens, want.ids[old_end + delta : new_end - 1])
    logits = llama.decode([want.tokens[-1]], slot.seq, new_end - 1, busy={slot.seq})
    slot.extend([want.tokens[-1]], [want.ids[-1]])
    slot.logits = logits
    return slot, logits


def keep_old_path(runner: SpliceHost, slot: Slot, old_end: int) -> None:
    """The splice moves ``slot``'s suffix cells: keep the old path too, as a real copy
    of its cells (``llama_state_seq_get_data`` / ``set_data``) in a free sequence,
    so that going back to it, or splicing it again, evaluates nothing. Skipped when
    no sequence is free or the cache has no room for the copy."""
    free = next((s for s in runner.slots if not s.tokens and s is not slot), None)
    if free is None or len(slot) <= old_end:
        return
    if not runner.grow(runner.cells_in_use() + len(slot)):
        return  # no room for the copy (a failed restore is logged by llama.cpp)
    if runner.llama.seq_restore(runner.llama.seq_save(slot.seq), free.seq):
        slot.copy_to(free, len(slot))
        free.used = runner.clock
        runner.kept_copies += 1
    else:
        runner.llama.seq_rm(free.seq, -1, -1)


def insert(runner: SpliceHost, slot: Slot, want: Want, start: int, count: int) -> None:
    """Give ``slot`` cells for ``want``'s tokens ``[start, start+count)``, evaluated
    after its first ``start`` cells only. llama.cpp evaluates a sequence only at its
    end, so they come from a sequence holding that prefix and then those tokens (the
    Loom has just prepared it), or are evaluated in a scratch sequence."""
    head = Want(want.tokens[: start + count], want.ids[: start + count], want.approx)
    donor = next(
        (s for s in runner.slots if s is not slot and matched(s, head) == start + count), None
    )
    scratch = None
    llama = runner.llama
    if donor is None:
        scratch = donor = runner.free_slot(busy={slot.seq})
        llama.seq_cp(slot.seq, scratch.seq, 0, start)
        llama.decode(head.tokens[start:], scratch.seq, start, busy={slot.seq, scratch.seq})
    llama.seq_cp(donor.seq, slot.seq, start, start + count)
    if scratch is not None:
        llama.seq_rm(scratch.seq, -1, -1)
        scratch.cut(0)
