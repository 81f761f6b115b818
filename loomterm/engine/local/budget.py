"""A cap on resident KV, with least-recently-used eviction.

Evicting a node drops its KV and keeps its tokens: coming back to it recomputes the KV
exactly (``PathCache.ensure``). The active path is never evicted. Nodes that share one
storage (the halves of a split) free memory only once all of them are evicted, so the
accounting is per storage, as ``kv.cache.kv_bytes`` counts it. What counts but is never
evicted here comes in as ``pinned``: the working buffer, and the injected memory's KV
kept beside it (``ContextKV.kept_storage``; freed when the memory is cleared).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable

import torch

from loomterm.errors import InputError
from loomterm.tree import Node

# Share of free memory the KV may take by default: the model and the working buffer
# need the rest.
DEFAULT_SHARE = 0.5
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str | int | None) -> int | None:
    """``"512M"``, ``"2G"``, ``"1.5g"``, ``"1000000"`` or an int -> bytes; None stays None."""
    if text is None or isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not match:
        raise InputError(f"cannot read a memory size from {text!r}: use e.g. 512M or 2G")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def default_budget(device: torch.device) -> int:
    """Half of the device's free memory now."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free * DEFAULT_SHARE)
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        free = 8 << 30
    return int(free * DEFAULT_SHARE)


class LruClock:
    """Remembers when each node's KV was last used."""

    def __init__(self) -> None:
        self._ticks = itertools.count()
        self.last_used: dict[int, int] = {}

    def touch(self, nodes) -> None:
        tick = next(self._ticks)
        for node in nodes:
            self.last_used[node.id] = tick

    def oldest_first(self, nodes) -> list:
        return sorted(nodes, key=lambda n: self.last_used.get(n.id, -1))


def storages(nodes: Iterable[Node]) -> dict[int, tuple[int, set[int]]]:
    """KV storages held by ``nodes``: data pointer -> (bytes, ids of the nodes on it).
    Views of one storage (the halves of a split, columns of the working buffer) share
    one entry."""
    out: dict[int, tuple[int, set[int]]] = {}
    for node in nodes:
        if node.kv is not None:
            storage = node.kv.untyped_storage()
            entry = out.setdefault(storage.data_ptr(), (storage.nbytes(), set()))
            entry[1].add(node.id)
    return out


def enforce(
    nodes: list[Node],
    limit: int,
    lru: LruClock,
    protect: Iterable[Node],
    evict: Callable[[Node], object],
    pinned: dict[int, int] | None = None,
) -> int:
    """Evict least recently used KV until what is resident fits ``limit``.

    ``protect`` (the active path) is never evicted. ``pinned`` maps storages that count
    but cannot be freed (the working buffer) to their bytes; nodes whose KV is a view
    of a pinned storage free nothing when evicted, so they are left alone. Returns the
    bytes resident afterwards.
    """
    pinned = pinned or {}
    held = storages(nodes)
    resident = sum(size for ptr, (size, _) in held.items() if ptr not in pinned)
    resident += sum(pinned.values())
    if resident <= limit:
        return resident
    keep = {node.id for node in protect}
    owner = {nid: ptr for ptr, (_, ids) in held.items() for nid in ids}
    candidates = [
        n for n in nodes if n.kv is not None and n.id not in keep and owner[n.id] not in pinned
    ]
    for node in lru.oldest_first(candidates):
        size, ids = held[owner[node.id]]
        evict(node)
        ids.discard(node.id)
        if not ids:
            resident -= size
            if resident <= limit:
                break
    return resident
