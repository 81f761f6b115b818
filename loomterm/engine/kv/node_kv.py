"""A node's own KV tensor, shaped ``(L, 2, H, T, D)``: its length, dividing it, and what
the nodes' tensors weigh (each shared storage counted once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from loomterm.engine.kv.resident import KVBytes

if TYPE_CHECKING:
    from loomterm.engine.kv.cache import WorkingCache


def kv_len(kv: torch.Tensor | None) -> int:
    """Tokens covered by a node's KV tensor (0 when absent)."""
    return 0 if kv is None else kv.shape[3]


def split_kv(
    kv: torch.Tensor | None, offset: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Divide a node's KV at ``offset`` into two views of the same storage."""
    if kv is None:
        return None, None
    head = kv[:, :, :, :offset] if offset > 0 else None  # (L, 2, H, offset, D)
    tail = kv[:, :, :, offset:] if kv.shape[3] > offset else None  # (L, 2, H, T-offset, D)
    return head, tail


def _storages(nodes) -> dict[int, int]:
    """Storage pointer -> bytes, for every KV tensor on ``nodes``. Reads each ``kv``
    once, so a node evicted meanwhile by another thread is merely skipped."""
    seen: dict[int, int] = {}
    for node in nodes:
        kv = node.kv
        if kv is not None:
            storage = kv.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return seen


def kv_bytes(nodes) -> int:
    """Bytes of KV storage held by ``nodes``, each shared storage counted once (a node
    aliasing the working buffer counts the whole buffer, once)."""
    return sum(_storages(nodes).values())


def resident_bytes(nodes, work: WorkingCache | None) -> KVBytes:
    """What ``nodes`` and ``work`` hold, each storage counted once: node KV that
    aliases the buffer is in ``working``, not in ``nodes``."""
    seen = _storages(nodes)
    working = 0
    if work is not None:
        buf = work.buf
        if buf.numel():
            seen.pop(buf.untyped_storage().data_ptr(), None)
        working = buf.numel() * buf.element_size()
    return KVBytes(sum(seen.values()), working)
