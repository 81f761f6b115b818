"""KV storage: per-node segments, and the in-place working cache of the active path.

Every node keeps the keys and values of (a prefix of) its own tokens as one tensor of
shape ``(L, 2, H, T, D)``: layers, key/value, KV heads, tokens, head dim. Keys are
stored rotated for the node's own path positions.

The model never sees node tensors directly. It runs on a ``WorkingCache``: a
preallocated buffer ``(L, 2, B, H, Tcap, D)`` written in place, in the spirit of
gpt-fast's ``KVCache``, and exposed to transformers through its ``Cache`` interface.
Decoding writes one column per step; nothing is concatenated. The buffer remembers
which node segments fill it, so moving to another branch keeps the longest common
prefix and copies only the rest.

References: gpt-fast ``model.py`` (KVCache), transformers ``cache_utils.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from loomterm.engine.rope import RopeSpec, rerotate
from loomterm.tree import Node


# -- node segments ------------------------------------------------------------------
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


def kv_bytes(nodes) -> int:
    """Bytes of KV storage held by ``nodes``, each shared storage counted once."""
    seen: dict[int, int] = {}
    for node in nodes:
        if node.kv is not None:
            storage = node.kv.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


# -- the working cache -------------------------------------------------------------
@dataclass
class Segment:
    """Tokens ``[lo, hi)`` of ``node`` occupy the next ``hi - lo`` buffer columns."""

    node: Node
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


class _BufferLayer(CacheLayerMixin):
    """One model layer's view of the shared buffer; writes land at the cache's cursor."""

    is_compileable = False
    is_croppable = True
    is_sliding = False

    def __init__(self, owner: WorkingCache, index: int) -> None:
        super().__init__()
        self.owner = owner
        self.index = index
        self.is_initialized = True

    @property
    def keys(self) -> torch.Tensor:  # (B, H, T, D)
        return self.owner.buf[self.index, 0, : self.owner.batch, :, : self.owner.length]

    @keys.setter
    def keys(self, value) -> None:  # the base class assigns None at construction
        pass

    @property
    def values(self) -> torch.Tensor:  # (B, H, T, D)
        return self.owner.buf[self.index, 1, : self.owner.batch, :, : self.owner.length]

    @values.setter
    def values(self, value) -> None:
        pass

    def lazy_initialization(self, key_states, value_states) -> None:  # buffer is preallocated
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        return self.owner.write(self.index, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.owner.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the working cache is cropped through WorkingCache.truncate")


class WorkingCache(Cache):
    """A growable, preallocated KV buffer for the active path (and its batch of rows).

    ``length`` columns are committed. A forward pass writes its new columns at
    ``length`` through ``write``; the caller then ``commit``s how many to keep (all of
    them, or only the accepted prefix of a draft).
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        max_len: int,
    ) -> None:
        self.n_layers, self.n_heads, self.head_dim = n_layers, n_heads, head_dim
        self.dtype, self.device, self.max_len = dtype, device, max_len
        self.buf = torch.empty(0, device=device, dtype=dtype)
        self.batch = 1
        self.length = 0
        self.pending = 0  # columns written past ``length`` by the current forward
        self.segments: list[Segment] = []  # what row 0 holds, in order
        self._reserve(1, 64)
        super().__init__(layers=[_BufferLayer(self, i) for i in range(n_layers)])

    # -- capacity -----------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.buf.shape[4]

    def _reserve(self, batch: int, columns: int) -> None:
        """Grow the buffer (doubling, capped at ``max_len``) to hold ``batch`` rows of
        ``columns`` tokens, keeping what is committed."""
        if self.buf.numel() and batch <= self.buf.shape[2] and columns <= self.capacity:
            return
        old_batch = self.buf.shape[2] if self.buf.numel() else 0
        cap = self.capacity if self.buf.numel() else 0
        new_cap = max(columns, min(self.max_len, max(64, cap * 2)))
        new_batch = max(batch, old_batch)
        buf = torch.empty(
            (self.n_layers, 2, new_batch, self.n_heads, new_cap, self.head_dim),
            dtype=self.dtype,
            device=self.device,
        )  # (L, 2, B, H, T, D)
        if self.length and old_batch:
            keep = min(old_batch, self.batch)
            buf[:, :, :keep, :, : self.length] = self.buf[:, :, :keep, :, : self.length]
        self.buf = buf

    def nbytes(self) -> int:
        """Bytes the buffer occupies."""
        return self.buf.numel() * self.buf.element_size()

    # -- transformers' side ----------------------------------------------------------
    def write(self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor):
        """Store a forward pass's new keys/values at ``length`` and return everything the
        queries may attend to. ``key_states``: (B, H, q, D)."""
        q = key_states.shape[2]
        end = self.length + q
        self.buf[layer, 0, : self.batch, :, self.length : end] = key_states
        self.buf[layer, 1, : self.batch, :, self.length : end] = value_states
        self.pending = q
        keys = self.buf[layer, 0, : self.batch, :, :end]  # (B, H, T+q, D)
        values = self.buf[layer, 1, : self.batch, :, :end]  # (B, H, T+q, D)
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.length

    @property
    def is_compileable(self) -> bool:
        return False

    # -- loomterm's side -----------------------------------------------------------
    def prepare(self, q: int, batch: int | None = None) -> None:
        """Make room for a forward pass of ``q`` new columns (over ``batch`` rows)."""
        if batch is not None and batch != self.batch:
            self._reserve(batch, self.length + q)
            self.batch = batch
        self._reserve(self.batch, self.length + q)

    def commit(self, count: int, node: Node | None = None, lo: int = 0) -> None:
        """Keep ``count`` of the columns just written; record them as tokens
        ``[lo, lo+count)`` of ``node`` (row 0's layout)."""
        self.length += count
        self.pending = 0
        if node is not None and count:
            last = self.segments[-1] if self.segments else None
            if last is not None and last.node is node and last.hi == lo:
                last.hi += count
            else:
                self.segments.append(Segment(node, lo, lo + count))

    def truncate(self, length: int) -> None:
        """Forget every column from ``length`` on."""
        length = max(0, min(length, self.length))
        self.length = length
        kept: list[Segment] = []
        total = 0
        for seg in self.segments:
            if total >= length:
                break
            take = min(seg.size, length - total)
            kept.append(Segment(seg.node, seg.lo, seg.lo + take))
            total += take
        self.segments = kept

    def load(self, node: Node, lo: int, hi: int) -> None:
        """Append tokens ``[lo, hi)`` of ``node`` from its stored KV (row 0 and every
        other row alike)."""
        count = hi - lo
        self.prepare(count)
        src = node.kv[:, :, :, lo:hi]  # (L, 2, H, count, D)
        self.buf[:, :, : self.batch, :, self.length : self.length + count] = src.unsqueeze(2)
        self.commit(count, node, lo)

    def keep_pending(self, offsets: list[int]) -> None:
        """Of the columns just written past ``length``, move those at ``offsets``
        (relative to ``length``, increasing) to sit right after ``length``; the caller
        then commits ``len(offsets)`` of them. Used when a verified draft was a tree."""
        if offsets == list(range(len(offsets))):
            return
        src = torch.tensor([self.length + o for o in offsets], device=self.device)
        dst = slice(self.length, self.length + len(offsets))
        self.buf[:, :, : self.batch, :, dst] = self.buf[:, :, : self.batch, :, src]

    def columns(self, start: int, end: int, row: int = 0) -> torch.Tensor:
        """A copy of committed columns ``[start, end)`` of one row, shaped like a node's
        KV: (L, 2, H, T, D)."""
        return self.buf[:, :, row, :, start:end].clone()

    def fork(self, batch: int) -> None:
        """Copy row 0 into rows ``1..batch-1`` so ``batch`` continuations share it."""
        self._reserve(batch, self.length + 1)
        self.batch = batch
        if batch > 1 and self.length:
            head = self.buf[:, :, :1, :, : self.length]  # (L, 2, 1, H, T, D)
            self.buf[:, :, 1:batch, :, : self.length] = head
        self.segments = list(self.segments)

    def select_row(self, row: int, segments: list[Segment]) -> None:
        """Make ``row`` the only row, laid out as ``segments``."""
        if row != 0:
            self.buf[:, :, 0, :, : self.length] = self.buf[:, :, row, :, : self.length]
        self.batch = 1
        self.segments = list(segments)

    def common_prefix_segments(self, target: list[Segment]) -> int:
        """How many leading columns already hold ``target``'s pieces, computed the
        same way (same nodes, same offsets, same columns)."""
        matched = 0
        mine = iter(self.segments)
        seg = next(mine, None)
        seg_used = 0  # columns of ``seg`` already matched
        for want in target:
            lo = want.lo
            while lo < want.hi:
                if seg is None or seg.node is not want.node or seg.lo + seg_used != lo:
                    return matched
                take = min(seg.size - seg_used, want.hi - lo)
                matched += take
                lo += take
                seg_used += take
                if seg_used == seg.size:
                    seg, seg_used = next(mine, None), 0
        return matched

    def forget_columns(self, start: int, count: int) -> None:
        """Remove columns ``[start, start+count)`` from the layout and the length; the
        caller moves the data that follows them."""
        out: list[Segment] = []
        col = 0
        for seg in self.segments:
            lo_col, hi_col = col, col + seg.size
            col = hi_col
            if hi_col <= start or lo_col >= start + count:
                out.append(seg)
                continue
            if lo_col < start:
                out.append(Segment(seg.node, seg.lo, seg.lo + start - lo_col))
            if hi_col > start + count:
                cut = start + count - lo_col
                out.append(Segment(seg.node, seg.lo + cut, seg.hi))
        self.segments = out
        self.length -= count

    def rename_split(self, head: Node, tail: Node, offset: int) -> None:
        """Rewrite the layout after ``tail``'s first ``offset`` tokens moved to ``head``."""
        out: list[Segment] = []
        for seg in self.segments:
            if seg.node is not tail:
                out.append(seg)
                continue
            if seg.lo < offset:
                out.append(Segment(head, seg.lo, min(seg.hi, offset)))
            if seg.hi > offset:
                out.append(Segment(tail, max(seg.lo, offset) - offset, seg.hi - offset))
        self.segments = out

    def forget(self, node: Node) -> None:
        """Drop every column from the first one that ``node`` fills (its KV changed)."""
        total = 0
        for seg in self.segments:
            if seg.node is node:
                self.truncate(total)
                return
            total += seg.size

    # -- node KV out of the buffer, and the window shift -------------------------------
    def extend(self, kv: torch.Tensor | None, start: int, end: int, row: int = 0) -> torch.Tensor:
        """A node's KV ``kv`` followed by committed columns ``[start, end)`` of ``row``:
        (L, 2, H, T, D)."""
        fresh = self.columns(start, end, row)
        return fresh if kv is None else torch.cat([kv, fresh], dim=3)

    def shift_columns(self, keep: int, drop: int, rope: RopeSpec) -> None:
        """Context shift in place: forget columns ``[keep, keep+drop)`` and move the
        rest down, their keys re-rotated back by ``drop`` positions (approximate)."""
        moved = self.buf[:, :, : self.batch, :, keep + drop : self.length]  # (L, 2, B, H, T, D)
        keys = rerotate(moved[:, 0], -drop, rope)
        values = moved[:, 1].clone()
        self.forget_columns(keep, drop)
        end = keep + keys.shape[3]
        self.buf[:, 0, : self.batch, :, keep:end] = keys
        self.buf[:, 1, : self.batch, :, keep:end] = values
