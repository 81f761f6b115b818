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

Node KV *aliases* that buffer where it can. ``columns`` and ``extend`` hand out views of
committed buffer columns, and ``load`` points a node at the columns it just filled from
the node's own copy, so the active path is held once. The buffer keeps every alias
valid (copy-on-overwrite): before it overwrites columns that some node's view covers,
it gives that node a compact copy of its whole view (``detach``); when it reallocates
(``_reserve``, ``shrink``) it points the views at the same columns of the new buffer,
so the old one is freed. It finds the candidates through ``WorkingCache.owners``,
which the loom sets to the tree's nodes; without it, nothing aliases (copies, as
before). Invariant: every alias lies in a row ``< batch`` and in columns
``< length``, so the hot path (``write`` at ``length``, ``keep_pending`` past it)
never has to look.

References: gpt-fast ``model.py`` (KVCache), transformers ``cache_utils.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from transformers.cache_utils import Cache

from loomterm.engine.kv import layout
from loomterm.engine.kv.layer import BufferLayer
from loomterm.engine.kv.layout import Segment
from loomterm.engine.kv.node_kv import kv_bytes, kv_len, resident_bytes, split_kv
from loomterm.engine.kv.resident import KVBytes
from loomterm.engine.kv.rope import RopeSpec, rerotate
from loomterm.tree import Node

# Names callers import from here: the segments and node KV helpers live beside the cache.
__all__ = [
    "KVBytes",
    "Owners",
    "Segment",
    "WorkingCache",
    "kv_bytes",
    "kv_len",
    "resident_bytes",
    "split_kv",
]


Owners = Callable[[], Iterable[Node]]
_ANYWHERE = (-1, 0, 1 << 62)  # the region of an alias whose layout cannot be read


class WorkingCache(Cache):
    """A growable, preallocated KV buffer for the active path (and its batch of rows).

    ``length`` columns are committed. A forward pass writes its new columns at
    ``length`` through ``write``; the caller then ``commit``s how many to keep (all of
    them, or only the accepted prefix of a draft).

    ``owners``: returns every node whose ``kv`` may alias the buffer (the loom sets it
    to the tree's nodes). While it is None, ``columns``/``extend`` return copies and
    ``load`` adopts nothing, so no alias exists that the cache could not find again.

    Capacity grows geometrically (doubling, capped at ``max_len``) so decoding rarely
    reallocates, and ``shrink`` (run by ``select_row``, i.e. after every batch) cuts it
    back to one row of the committed length rounded up to ``GRANULE`` columns. The
    price: the next pass after a shrink usually reallocates once (one copy of the
    committed columns), where a buffer left large would not.
    """

    GRANULE = 16  # shrink rounds the capacity up to a multiple of this

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
        self.owners: Owners | None = None
        self._shared = 0  # leading committed columns known equal in every row
        # The first column whose KV a context shift re-rotated (approximate), None when
        # every column was computed where it sits; the columns after it are approximate
        # too (computed on top of it).
        self.approx_from: int | None = None
        self._reserve(1, 64)
        super().__init__(layers=[BufferLayer(self, i) for i in range(n_layers)])

    # -- capacity -----------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.buf.shape[4]

    def _reserve(self, batch: int, columns: int, exact: bool = False) -> None:
        """Grow the buffer to hold ``batch`` rows of ``columns`` tokens, keeping what is
        committed and re-pointing the aliases. Columns grow by doubling (capped at
        ``max_len``), or to exactly ``columns`` when ``exact``."""
        if self.buf.numel() and batch <= self.buf.shape[2] and columns <= self.capacity:
            return
        old_batch = self.buf.shape[2] if self.buf.numel() else 0
        cap = self.capacity if self.buf.numel() else 0
        if exact:
            new_cap = max(columns, self.length)
        else:
            new_cap = max(columns, min(self.max_len, max(64, cap * 2)))
        keep = min(old_batch, self.batch)
        self._reallocate(max(batch, old_batch), new_cap, list(range(keep)))

    def _reallocate(self, batch: int, cap: int, rows: list[int]) -> None:
        """A new buffer of ``batch`` rows by ``cap`` columns whose row ``i`` holds old row
        ``rows[i]``'s committed columns. Aliases of those columns are re-pointed to the
        new buffer (same columns, new storage); any other alias gets its own copy, so
        the old buffer is freed."""
        buf = torch.empty(
            (self.n_layers, 2, batch, self.n_heads, cap, self.head_dim),
            dtype=self.dtype,
            device=self.device,
        )  # (L, 2, B, H, T, D)
        n = self.length
        if n and rows:
            if rows == list(range(len(rows))):
                buf[:, :, : len(rows), :, :n] = self.buf[:, :, : len(rows), :, :n]
            else:
                for new, old in enumerate(rows):
                    buf[:, :, new, :, :n] = self.buf[:, :, old, :, :n]
        where = {old: new for new, old in enumerate(rows)}
        if len(rows) == 1:
            # Columns every row shares are in the new row too, whichever row they alias.
            where.update({r: 0 for r in range(self.buf.shape[2] if self.buf.numel() else 0)})

        def target(row: int, lo: int, hi: int) -> int | None:
            if row not in where or hi > n:
                return None
            if len(rows) == 1 and row != rows[0] and hi > self._shared:
                return None
            return where[row]

        self._rebase(buf, target)
        self.buf = buf

    def nbytes(self) -> int:
        """Bytes the buffer occupies."""
        return self.buf.numel() * self.buf.element_size()

    # -- aliases -------------------------------------------------------------------
    def region(self, kv: torch.Tensor | None) -> tuple[int, int, int] | None:
        """Where ``kv`` aliases the buffer: ``(row, start, end)`` columns of one row, or
        None when it has its own storage. An alias whose layout is not a plain column
        range of one row reads as row -1 over every column (always detached)."""
        buf = self.buf
        if kv is None or not buf.numel():
            return None
        if kv.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
            return None
        L, _, B, H, T, D = buf.shape
        s = buf.stride()  # (L, 2, B, H, T, D)
        offset = kv.storage_offset() - buf.storage_offset()
        if (
            kv.dim() == 5
            and tuple(kv.shape[:3]) == (L, 2, H)
            and kv.shape[4] == D
            and kv.stride() == (s[0], s[1], s[3], s[4], s[5])
            and offset >= 0
        ):
            row, rest = divmod(offset, s[2])
            start, odd = divmod(rest, s[4])
            if not odd and row < B and start + kv.shape[3] <= T:
                return row, start, start + kv.shape[3]
        return _ANYWHERE

    def aliases(self) -> list[tuple[Node, tuple[int, int, int]]]:
        """Every owner node whose KV aliases the buffer, with its ``region``."""
        if self.owners is None or not self.buf.numel():
            return []
        mine = self.buf.untyped_storage().data_ptr()
        out = []
        for node in list(self.owners()):
            kv = node.kv
            if kv is not None and kv.untyped_storage().data_ptr() == mine:
                out.append((node, self.region(kv)))
        return out

    def detach(self, safe: Callable[[int, int, int], bool] | None = None) -> int:
        """Give every aliasing node for which ``safe(row, start, end)`` is false (every
        one, without ``safe``) a compact copy of its whole view; nodes sharing one view
        keep sharing one copy. Returns how many nodes were detached."""
        copies: dict[tuple, torch.Tensor] = {}
        count = 0
        for node, (row, lo, hi) in self.aliases():
            if row >= 0 and safe is not None and safe(row, lo, hi):
                continue
            node.kv = _shared_copy(copies, node.kv)
            count += 1
        return count

    def _detach_from(self, column: int, rows: int | None = None) -> None:
        """Detach aliases that reach column ``column`` or beyond, or that lie in a row
        ``>= rows`` (those rows are about to be overwritten or dropped)."""
        limit = self.batch if rows is None else rows
        self.detach(lambda row, lo, hi: hi <= column and row < limit)

    def _rebase(self, buf: torch.Tensor, target: Callable[[int, int, int], int | None]) -> None:
        """Point aliases at the same columns of ``buf``, in row ``target(row, lo, hi)``;
        where that is None, give them a copy instead."""
        copies: dict[tuple, torch.Tensor] = {}
        for node, (row, lo, hi) in self.aliases():
            new_row = target(row, lo, hi) if row >= 0 else None
            if new_row is not None:
                node.kv = buf[:, :, new_row, :, lo:hi]  # (L, 2, H, T, D)
                continue
            node.kv = _shared_copy(copies, node.kv)

    def _fit(self, length: int) -> int:
        """The capacity ``shrink`` keeps for ``length`` committed columns."""
        granule = self.GRANULE
        rounded = max(granule, -(-length // granule) * granule)
        return max(length, min(rounded, max(self.max_len, length)))

    def shrink(self, row: int = 0) -> None:
        """Keep only ``row``, as row 0, in a buffer of one row whose capacity fits the
        committed columns (rounded up to ``GRANULE``). Aliases of that row, and of the
        columns every row shares, are re-pointed; those of other rows get copies (their
        siblings' suffixes, after a batch). Nothing happens when the buffer already is
        one row of that size."""
        if not 0 <= row < max(1, self.batch):
            raise ValueError(f"row {row} is not one of the {self.batch} rows")
        fit = self._fit(self.length)
        if self.buf.shape[2] == 1 and row == 0 and self.capacity <= fit:
            self.batch = 1
            self._shared = self.length
            return
        self._reallocate(1, fit, [row])
        self.batch = 1
        self._shared = self.length

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
            if batch < self.batch:
                self._detach_from(self.length, rows=batch)  # rows past ``batch`` drop out
            else:
                self._shared = 0  # the new rows hold nothing yet
            self._reserve(batch, self.length + q)
            self.batch = batch
        self._reserve(self.batch, self.length + q)

    def commit(self, count: int, node: Node | None = None, lo: int = 0) -> None:
        """Keep ``count`` of the columns just written; record them as tokens
        ``[lo, lo+count)`` of ``node`` (row 0's layout)."""
        self.length += count
        self.pending = 0
        if node is not None and count:
            layout.appended(self.segments, node, lo, count)

    def truncate(self, length: int) -> None:
        """Forget every column from ``length`` on. They will be written again, so nodes
        whose view reaches them get a copy of their whole view first."""
        length = max(0, min(length, self.length))
        if length < self.length:
            self._detach_from(length)
        self.length = length
        self._shared = min(self._shared, length)
        if self.approx_from is not None and self.approx_from >= length:
            self.approx_from = None
        self.segments = layout.truncated(self.segments, length)

    def load(self, node: Node, lo: int, hi: int) -> None:
        """Append tokens ``[lo, hi)`` of ``node`` from its stored KV (row 0 and every
        other row alike). When that is all of its own copy, the node then aliases the
        columns instead (the same values, now held once)."""
        count = hi - lo
        self.prepare(count)  # may reallocate: read the source after it
        start = self.length
        src = node.kv[:, :, :, lo:hi]  # (L, 2, H, count, D); aliases end before ``start``
        self.buf[:, :, : self.batch, :, start : start + count] = src.unsqueeze(2)
        own = self.region(node.kv) is None
        self.commit(count, node, lo)
        if self._shared == start:
            self._shared = self.length
        if own and lo == 0 and hi == kv_len(node.kv) and self.owners is not None:
            node.kv = self.buf[:, :, 0, :, start : self.length]

    def adopt(self, node: Node, start: int, row: int = 0) -> bool:
        """Point ``node.kv`` at committed columns ``[start, start + kv_len(node.kv))`` of
        ``row`` instead of its own copy, which the caller vouches they hold (loaded from
        it, or recomputed at the same positions). Returns whether it did; it does not
        when the node has no KV or already aliases, when the columns are not committed,
        or when no ``owners`` could find the alias again."""
        end = start + kv_len(node.kv)
        if (
            self.owners is None
            or node.kv is None
            or self.region(node.kv) is not None
            or not (0 <= start < end <= self.length and 0 <= row < self.batch)
        ):
            return False
        node.kv = self.buf[:, :, row, :, start:end]
        return True

    def keep_pending(self, offsets: list[int]) -> None:
        """Of the columns just written past ``length``, move those at ``offsets``
        (relative to ``length``, increasing) to sit right after ``length``; the caller
        then commits ``len(offsets)`` of them. Used when a verified draft was a tree.
        Only uncommitted columns move, and no alias reaches those."""
        if offsets == list(range(len(offsets))):
            return
        src = torch.tensor([self.length + o for o in offsets], device=self.device)
        dst = slice(self.length, self.length + len(offsets))
        self.buf[:, :, : self.batch, :, dst] = self.buf[:, :, : self.batch, :, src]

    def columns(self, start: int, end: int, row: int = 0) -> torch.Tensor:
        """Committed columns ``[start, end)`` of one row, shaped like a node's KV:
        (L, 2, H, T, D). A view of the buffer (a copy while ``owners`` is None): store
        it only on a node that ``owners`` yields."""
        if not (0 <= start <= end <= self.length and 0 <= row < self.batch):
            raise ValueError(
                f"columns {start}..{end} of row {row} are not committed "
                f"({self.length} columns, {self.batch} rows)"
            )
        view = self.buf[:, :, row, :, start:end]
        return view if self.owners is not None else view.clone()

    def extend(self, kv: torch.Tensor | None, start: int, end: int, row: int = 0) -> torch.Tensor:
        """``kv`` followed by committed columns ``[start, end)`` of ``row``: a wider view
        when ``kv`` is a view of that row ending at ``start`` (nothing copied), else a
        concatenation (``kv`` None: ``columns``)."""
        fresh = self.columns(start, end, row)
        if kv is None or kv.shape[3] == 0:
            return fresh
        where = self.region(kv)
        if self.owners is not None and where is not None and where[0] == row and where[2] == start:
            return self.buf[:, :, row, :, where[1] : end]
        return torch.cat([kv, fresh], dim=3)

    def fork(self, batch: int, columns: int | None = None) -> None:
        """Copy row 0 into rows ``1..batch-1`` so ``batch`` continuations share it.
        ``columns``: how many columns the batch will reach, if known (e.g. the length
        plus the new tokens); the buffer is then sized to exactly that, not doubled."""
        self._detach_from(self.length, rows=1)  # rows 1.. are overwritten
        need = self.length + 1
        if columns is None:
            self._reserve(batch, need)
        else:
            self._reserve(batch, max(need, min(columns, self.max_len)), exact=True)
        self.batch = batch
        if batch > 1 and self.length:
            head = self.buf[:, :, :1, :, : self.length]  # (L, 2, 1, H, T, D)
            self.buf[:, :, 1:batch, :, : self.length] = head
        self._shared = self.length
        self.segments = list(self.segments)

    def select_row(self, row: int, segments: list[Segment]) -> None:
        """Make ``row`` the only row, laid out as ``segments``, and ``shrink`` to it."""
        self.shrink(row)
        self.segments = list(segments)

    def common_prefix_segments(self, target: list[Segment]) -> int:
        """How many leading columns already hold ``target``'s pieces, computed the
        same way (same nodes, same offsets, same columns)."""
        return layout.common_prefix(self.segments, target)

    def forget_columns(self, start: int, count: int) -> None:
        """Remove columns ``[start, start+count)`` from the layout and the length; the
        caller moves the data that follows them, so views reaching ``start`` or beyond
        get copies first."""
        self._detach_from(start)
        self._shared = min(self._shared, start)
        self.segments = layout.without_columns(self.segments, start, count)
        self.length -= count

    def rename_split(self, head: Node, tail: Node, offset: int) -> None:
        """Rewrite the layout after ``tail``'s first ``offset`` tokens moved to ``head``."""
        self.segments = layout.split_renamed(self.segments, head, tail, offset)

    def forget_from(self, node: Node, offset: int) -> None:
        """Drop every column from ``node``'s token ``offset`` on (its tokens from there
        changed); the columns before it stay."""
        column = layout.column_of(self.segments, node, offset)
        if column is not None:
            self.truncate(column)

    def forget(self, node: Node) -> None:
        """Drop every column from the first one that ``node`` fills (its KV changed)."""
        column = layout.column_of(self.segments, node)
        if column is not None:
            self.truncate(column)

    # -- the window shift -------------------------------------------------------------
    def shift_columns(self, keep: int, drop: int, rope: RopeSpec) -> None:
        """Context shift in place: forget columns ``[keep, keep+drop)`` and move the
        rest down, their keys re-rotated back by ``drop`` positions (approximate)."""
        moved = self.buf[:, :, : self.batch, :, keep + drop : self.length]  # (L, 2, B, H, T, D)
        keys = rerotate(moved[:, 0], -drop, rope)
        values = moved[:, 1].clone()
        self.forget_columns(keep, drop)
        if keys.shape[3]:
            self.approx_from = keep if self.approx_from is None else min(self.approx_from, keep)
        end = keep + keys.shape[3]
        self.buf[:, 0, : self.batch, :, keep:end] = keys
        self.buf[:, 1, : self.batch, :, keep:end] = values


def _shared_copy(copies: dict[tuple, torch.Tensor], kv: torch.Tensor) -> torch.Tensor:
    """A compact copy of the view ``kv``: the one already in ``copies`` when another
    node shares that view (same offset, shape and strides), so they keep sharing."""
    key = (kv.storage_offset(), tuple(kv.shape), kv.stride())
    if key not in copies:
        copies[key] = kv.clone(memory_format=torch.contiguous_format)
    return copies[key]
