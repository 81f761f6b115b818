"""The local runner's KV for an injected context (memory, world info, author's note).

When something is injected the model sees ``engine.context.Assembled.tokens``, not the
path, so the KV stored on nodes (keyed to the plain path's positions) is no use after
the first injected token. :class:`ContextKV` brings such a sequence into the working
cache the way llama-server's ``cache_prompt`` does: it keeps the longest common prefix
already in the buffer and computes the rest, exactly.

- Injected runs are laid out as segments of stand-in nodes, one per distinct run of
  tokens (kind and ids), so the buffer's own bookkeeping
  (``WorkingCache.common_prefix_segments``) compares sequences run by run: memory is
  the common prefix of every branch, and moving the author's note recomputes from its
  old insertion point only.
- The path tokens before the first injected one sit at their own positions: their KV
  comes from the nodes, as in the plain case (an author's note alone reuses the
  whole document above it).
- The memory's KV (with the start tokens before it) is kept once more beside the
  buffer, so coming back from a plain path or another memory loads it instead of
  computing it again.
- Nothing computed after an injected token is stored on a node, but typed tokens get
  their records (log-probability, alternatives) from the prefill, as in the plain
  case. ``computed`` counts the tokens each ``ensure`` ran through the model.
- A fast splice (RoPE models) keeps the buffer's columns of the unchanged suffix
  (:meth:`hold`) -- the document after the edit, the author's note among it -- and
  the next ``ensure`` of the spliced branch puts them at their new columns, keys
  re-rotated by the shift, instead of computing them: approximate, as the plain fast
  splice's moved KV is (the copies are flagged; ``work.approx_from`` marks the
  columns). Only the inserted tokens and the last one are computed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from loomterm.engine.context import MEMORY, PATH, WORLD_INFO, Assembled
from loomterm.engine.kv.cache import Segment, kv_len
from loomterm.engine.kv.rope import rerotate
from loomterm.engine.kv.window import segments
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine.kv.cache import WorkingCache
    from loomterm.engine.local.host import LocalHost

_MAX_STANDINS = 256
# Columns per forward when a full window is refilled: path_cache's PREFILL_CHUNK (that
# module sits above this one in the engine's layers, so the figure is repeated here).
REFILL_CHUNK = 512


@dataclass
class _Held:
    """A fast splice's suffix as the buffer held it (see :meth:`ContextKV.hold`).

    Attributes:
        at: Path position where the suffix starts on the spliced branch.
        keys: Per column, what it holds: ``("p", token)`` for a path token, ``("s",
            standin, i)`` for an injected run's ``i``-th token.
        kv: (L, 2, H, T, D) those columns as computed in the old sequence.
        column: The buffer column the first of them sat at.
    """

    at: int
    keys: list[tuple]
    kv: torch.Tensor
    column: int


class CacheView(Protocol):
    """What :class:`ContextKV` reads of its path cache (``local.path_cache.PathCache``,
    which sits above this module)."""

    runner: LocalHost
    work: WorkingCache
    assembled: Assembled | None
    store_kv: bool

    def remember(self, logits: torch.Tensor | None) -> None: ...

    def remembered(self, columns: int) -> torch.Tensor | None: ...

    def forget_past(self, keep: int) -> None: ...

    def invalidate(self) -> None: ...

    def run_chunks(
        self,
        ids: list[int],
        owners: list[tuple[Node, int]],
        need: list[bool],
        on_chunk: Callable[[int], None] | None,
    ) -> torch.Tensor: ...


class ContextKV:
    """The working cache holding an assembled context (see the module docstring).

    Attributes:
        computed: Tokens the latest :meth:`ensure` ran through the model.
        total_computed: The same, summed over every call.
    """

    def __init__(self, cache: CacheView) -> None:
        self.cache = cache
        self.runner = cache.runner
        self.work = cache.work
        self._standins: dict[tuple, Node] = {}
        self._memory: tuple[tuple[int, ...], torch.Tensor] | None = None  # ids, (L,2,H,T,D)
        self._held: _Held | None = None
        self.computed = 0
        self.total_computed = 0

    def standin(self, kind: str, tokens: tuple[int, ...]) -> Node:
        """The one node that stands for this injected run in the buffer's layout."""
        key = (kind, tokens)
        node = self._standins.get(key)
        if node is None:
            if len(self._standins) >= _MAX_STANDINS:
                self._standins.clear()  # the buffer no longer matches: recomputed once
            node = self._standins[key] = Node(id=-1 - len(self._standins), tokens=list(tokens))
        return node

    def layout(self, assembled: Assembled, node: Node) -> list[Segment]:
        """``assembled`` as buffer segments: path runs of real nodes, stand-ins."""
        out: list[Segment] = []
        for piece in assembled.pieces:
            if piece.kind == PATH:
                out += [Segment(n, lo, hi) for n, lo, hi in segments(node, piece.lo, piece.hi)]
            else:
                out.append(Segment(self.standin(piece.kind, piece.tokens), 0, piece.size))
        return out

    def ensure(self, node: Node, assembled: Assembled) -> torch.Tensor:
        """Make row 0 of the working cache hold ``assembled`` (the sequence for
        ``node``) and return the (V,) logits after it."""
        cache, work = self.cache, self.work
        if work.batch != 1:
            work.select_row(0, work.segments)
        target = self.layout(assembled, node)
        columns = len(assembled.tokens)
        keep = work.common_prefix_segments(target)
        self.computed = 0
        if keep == columns and (logits := cache.remembered(columns)) is not None:
            return logits
        keep = min(keep, columns - 1)
        work.truncate(keep)
        cache.forget_past(keep)
        keep = self._load_memory(assembled, target, keep, columns)
        placed = self._placement(node, assembled, target, keep, columns)
        first, last = (placed[0], placed[0] + placed[1].shape[3]) if placed else (-1, -1)
        plan: list[tuple[Node, int, int]] = []
        col = 0
        for seg in target:
            begin, col = col, col + seg.size
            if col <= keep:
                continue
            lo = seg.lo + max(0, keep - begin)
            if col <= assembled.plain and cache.store_kv:  # path tokens in place: node KV
                have = min(kv_len(seg.node.kv), seg.hi)
                if placed is not None:  # node KV only before the held columns
                    have = min(have, seg.lo + max(0, first - begin))
                if col == columns:
                    have = min(have, seg.hi - 1)  # the last token is computed, for logits
                if lo < have:
                    if plan:
                        self._compute(plan)
                    plan = []
                    work.load(seg.node, lo, have)
                    lo = have
            # The held suffix's columns in this segment: moved, not computed.
            p_lo = max(lo, seg.lo + first - begin)
            p_hi = min(seg.hi, seg.lo + last - begin)
            if placed is not None and p_lo < p_hi:
                if lo < p_lo:
                    plan.append((seg.node, lo, p_lo))
                if plan:
                    self._compute(plan)
                plan = []
                self._place(placed, seg.node, p_lo, p_hi)
                lo = p_hi
            if lo < seg.hi:
                plan.append((seg.node, lo, seg.hi))
        logits = self._compute(plan)
        self._keep_memory(assembled)
        self.total_computed += self.computed
        cache.remember(logits)
        logits = cache.remembered(work.length)  # the memo's own copy
        path = node.path()
        self.runner.touch(path)
        self.runner.enforce_budget(path)
        return logits

    def history(self, node: Node) -> list[int]:
        """The tokens the penalties and DRY read before a generation's own, for
        ``node`` just ensured: what the model sees -- the assembled context under
        injection, memory and notes included -- else the path. llama-server runs every
        prompt token through its sampler chain (``common_sampler_accept``) and
        koboldcpp fills its penalty range from the prompt, which holds the memory,
        world info and note (Lite builds it so); ``penalty_last_n`` and
        ``dry_penalty_last_n`` bound how far back it reaches, as there."""
        assembled = self.cache.assembled
        return node.path_tokens() if assembled is None else list(assembled.tokens)

    # -- a generation that fills the window ---------------------------------------------
    def refill(self, kids: list[Node], live: list[bool]) -> torch.Tensor:
        """The window is full in the middle of a generation (``decode.plain.plain_decode``):
        re-assemble each row's sequence for its path as it is now, the pending token
        included -- the memory and the world info the generation started with stay on
        top, the author's note keeps its depth from the new end, the window drops the
        oldest document tokens in its blocks -- and recompute every row after the kept
        prefix (start tokens, memory, world info), exactly, as a recompute of the new
        sequence gives. Rows that stopped (``live`` False) get a live row's sequence:
        their columns are ignored. Returns (B, V) logits after each row's sequence; the
        buffer's segments lay row 0's out (``cache.assembled`` becomes it).

        World info is not scanned again: the rows' sequences then keep one length (an
        entry triggered in one row only would make the batch ragged), as a request to
        koboldcpp scans once per request. The next operation assembles afresh."""
        cache, work, runner = self.cache, self.work, self.runner
        old = cache.assembled
        assert old is not None
        wi = [piece.tokens for piece in old.pieces if piece.kind == WORLD_INFO]
        made: dict[int, Assembled] = {}
        for row, kid in enumerate(kids):
            if live[row]:
                kid_made = runner.context_for(kid, 0, world_info=wi)
                assert kid_made is not None  # the generation's assembly injects
                made[row] = kid_made
        first = min(made)
        rows = [made.get(row, made[first]) for row in range(len(kids))]
        keep = old.kept
        if any(m.kept != keep or m.tokens[:keep] != old.tokens[:keep] for m in rows):
            keep = 0  # never: the kept prefix is the generation's own (a safe fallback)
        width = len(rows[0].tokens) - keep
        if any(len(m.tokens) - keep != width for m in rows):
            raise AssertionError("rows of one generation re-assemble to one length")
        work.truncate(keep)
        ids = torch.tensor([m.tokens[keep:] for m in rows], device=runner.device)  # (B, q)
        logits = None
        for begin in range(0, width, REFILL_CHUNK):
            chunk = ids[:, begin : begin + REFILL_CHUNK]  # (B, c)
            logits = runner.forward(chunk)[:, -1]  # (B, V)
            work.commit(chunk.shape[1])
        self.computed += width * len(made)
        self.total_computed += width * len(made)
        cache.assembled = rows[0]
        work.segments = self.layout(rows[0], kids[0] if 0 in made else kids[first])
        cache.invalidate()
        return logits

    # -- a fast splice's suffix, moved -------------------------------------------------
    def hold(self, suffix: list[tuple[Node, int, int]], at: int) -> bool:
        """A fast splice is about to copy ``suffix`` (its ``(node, lo, hi)`` pieces, in
        path order) to a branch where it starts at path position ``at``: keep the
        buffer's columns of it, the injected runs among them (the author's note), as
        far as the buffer holds it in order, for the branch's next :meth:`ensure`.
        Returns whether anything is held: only when the buffer holds an injected
        context (``cache.assembled``) and the model's keys can be re-rotated."""
        self._held = None
        work = self.work
        if self.runner.rope is None or self.cache.assembled is None or not suffix:
            return False
        want = iter([(n, i) for n, lo, hi in suffix for i in range(lo, hi)])
        nxt = next(want, None)
        keys: list[tuple] = []
        start = None
        col = 0
        for seg in work.segments:
            begin, col = col, col + seg.size
            if start is None:
                if seg.node is nxt[0] and seg.lo <= nxt[1] < seg.hi:
                    start = begin + nxt[1] - seg.lo
                    lo = nxt[1]
                else:
                    continue
            else:
                lo = seg.lo
            if seg.node.id < 0:  # an injected run (a stand-in node)
                keys += [("s", seg.node, i) for i in range(lo, seg.hi)]
                continue
            for i in range(lo, seg.hi):
                if nxt is None or nxt != (seg.node, i):
                    break
                keys.append(("p", seg.node.tokens[i]))
                nxt = next(want, None)
            else:
                continue
            break
        while keys and keys[-1][0] == "s":
            keys.pop()  # a run at the end holds no document: nothing to gain
        if start is None or not keys:
            return False
        kv = work.columns(start, start + len(keys)).clone()  # (L, 2, H, T, D)
        self._held = _Held(at, keys, kv, start)
        return True

    def _placement(
        self, node: Node, assembled: Assembled, target: list[Segment], keep: int, columns: int
    ) -> tuple[int, torch.Tensor] | None:
        """Where the held suffix goes in ``target`` (the spliced branch's layout): its
        first column there and its (L, 2, H, T, D) KV, keys re-rotated by the shift;
        None when nothing held fits. Only the columns that hold what the buffer held
        (same tokens, same injected runs, in order) are used, never the last one (its
        logits are computed), and only on a branch whose moved nodes are flagged
        approximate. The hold is spent either way, unless ``node`` ends before it."""
        held = self._held
        if held is None or node.end <= held.at:
            return None
        self._held = None
        first, col = None, 0
        for piece in assembled.pieces:
            if piece.kind == PATH and piece.lo <= held.at < piece.hi:
                first = col + held.at - piece.lo
                break
            col += piece.size
        if first is None or first < keep:
            return None
        count, col = 0, 0
        for seg in target:
            begin, col = col, col + seg.size
            if col <= first:
                continue
            if begin <= first and (seg.node.id < 0 or not seg.node.approx):
                return None  # the moved suffix starts with a flagged copy, or is not this
            for i in range(seg.lo + max(0, first - begin), seg.hi):
                if count == len(held.keys) or first + count >= columns - 1:
                    break
                key = ("s", seg.node, i) if seg.node.id < 0 else ("p", seg.node.tokens[i])
                if key != held.keys[count]:
                    break
                count += 1
            else:
                continue
            break
        while count and held.keys[count - 1][0] == "s":
            count -= 1
        if not count:
            return None
        kv = held.kv[:, :, :, :count]  # (L, 2, H, T, D)
        keys = rerotate(kv[:, 0], first - held.column, self.runner.rope)  # (L, H, T, D)
        return first, torch.stack([keys, kv[:, 1]], dim=1)

    def _place(self, placed: tuple[int, torch.Tensor], node: Node, lo: int, hi: int) -> None:
        """Append the held columns of ``node``'s tokens ``[lo, hi)`` (re-rotated)."""
        first, kv = placed
        work = self.work
        count = hi - lo
        work.prepare(count)
        start = work.length
        src = kv[:, :, :, start - first : start - first + count]  # (L, 2, H, count, D)
        work.buf[:, :, :1, :, start : start + count] = src.unsqueeze(2)
        work.commit(count, node, lo)
        work.approx_from = start if work.approx_from is None else min(work.approx_from, start)

    # -- memory, computed once --------------------------------------------------------
    @staticmethod
    def _memory_end(assembled: Assembled) -> int:
        """Columns of the start tokens and the memory (0 without memory)."""
        col = 0
        for piece in assembled.pieces:
            col += piece.size
            if piece.kind == MEMORY:
                return col
            if piece.kind != PATH:
                return 0
        return 0

    def _load_memory(
        self, assembled: Assembled, target: list[Segment], keep: int, columns: int
    ) -> int:
        """Load the kept memory KV into columns ``keep..`` when it is this memory's;
        returns the columns held."""
        end = min(self._memory_end(assembled), columns - 1)
        if self._memory is None or keep >= end:
            return keep
        ids, kv = self._memory
        if ids[:end] != tuple(assembled.tokens[:end]):
            return keep
        work = self.work
        work.prepare(end - keep)
        # Uncommitted columns past ``length``: no node's view reaches them.
        work.buf[:, :, :1, :, keep:end] = kv[:, :, :, keep:end].unsqueeze(2)
        col = 0
        for seg in target:
            begin, col = col, col + seg.size
            lo, hi = max(begin, keep), min(col, end)
            if lo < hi:
                work.commit(hi - lo, seg.node, seg.lo + lo - begin)
            if col >= end:
                break
        return end

    def nbytes(self) -> int:
        """Bytes of the memory's KV kept beside the buffer (0: none). Safe from any
        thread: one read of the attribute."""
        kept = self._memory
        return 0 if kept is None else kept[1].untyped_storage().nbytes()

    def kept_storage(self) -> dict[int, int]:
        """The kept memory KV as ``budget.enforce``'s ``pinned``: storage -> bytes."""
        kept = self._memory
        if kept is None:
            return {}
        storage = kept[1].untyped_storage()
        return {storage.data_ptr(): storage.nbytes()}

    def release_memory(self) -> None:
        """Drop the kept memory KV (the memory setting was cleared): a later memory
        is computed, and kept, again."""
        self._memory = None

    def _keep_memory(self, assembled: Assembled) -> None:
        end = self._memory_end(assembled)
        ids = tuple(assembled.tokens[:end])
        if end and (self._memory is None or self._memory[0] != ids) and self.work.length >= end:
            self._memory = (ids, self.work.columns(0, end).clone())  # (L, 2, H, T, D)

    # -- computing --------------------------------------------------------------------
    def _compute(self, plan: list[tuple[Node, int, int]]) -> torch.Tensor:
        """Run ``plan``'s tokens after the buffer's columns, in chunks; (V,) logits."""
        runner = self.runner
        ids = [t for n, lo, hi in plan for t in n.tokens[lo:hi]]
        owners = [(n, i) for n, lo, hi in plan for i in range(lo, hi)]
        # Typed tokens get their records (log-probability, alternatives) from this
        # prefill's logits, as in the plain case: what the model saw predicting them.
        need = [runner.keep_records and n.id >= 0 and n.logprobs[i] is None for n, i in owners]

        def count(tokens: int) -> None:
            self.computed += tokens

        return self.cache.run_chunks(ids, owners, need, on_chunk=count)
