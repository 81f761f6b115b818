"""Keeping the working cache in step with the tree (the local runner's KV bookkeeping).

``PathCache.ensure(node)`` makes the working cache hold ``node``'s path (its window,
for a path longer than the context) and returns the logits after it: it keeps the
common prefix already in the buffer, loads KV stored on the nodes, computes only what
is missing, and stores what it computed back on the nodes. The decoders hand their
children's KV back through :meth:`store_generated` and remember the last logits with
:meth:`remember`, so the next operation at that point computes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from loomterm.engine.events import Event
from loomterm.engine.kv.cache import Segment, kv_len
from loomterm.engine.kv.window import segments
from loomterm.engine.local.context_kv import ContextKV
from loomterm.engine.sample.chain import token_record_tensor, unpack_token_records
from loomterm.errors import EmptyEditError, PrefillCancelled
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine.context import Assembled
    from loomterm.engine.local.host import LocalHost

PREFILL_CHUNK = 512
RECORD_BLOCK = 64  # rows of logits per records computation


class PathCache:
    """The working cache's contents, in tree terms, and the logits after them."""

    def __init__(self, runner: LocalHost) -> None:
        self.runner = runner
        self.work = runner.work
        self.window = runner.window
        self._logits: torch.Tensor | None = None  # (V,) after the buffer's columns
        self._logits_len = -1
        # False beside another local runner that owns node KV: ``node.kv`` is never
        # read or written here, only the working cache (``LocalRunner.without_node_kv``).
        self.store_kv = True
        # Memory, world info, author's note: the sequence of the latest ``ensure``
        # (None: the plain path), brought in by ``local.context_kv`` (see there).
        self.assembled: Assembled | None = None
        self.context = ContextKV(self)

    # -- the logits memo --------------------------------------------------------------
    def remember(self, logits: torch.Tensor | None) -> None:
        """``logits`` (V,) follow the buffer's row 0 as it is now (None: unknown)."""
        self._logits = None if logits is None else logits.clone()
        self._logits_len = self.work.length if logits is not None else -1

    def invalidate(self) -> None:
        self._logits, self._logits_len = None, -1

    def remembered(self, columns: int) -> torch.Tensor | None:
        """The remembered (V,) logits when they follow exactly ``columns`` columns."""
        return self._logits if self._logits_len == columns else None

    def forget_past(self, keep: int) -> None:
        """Forget the remembered logits if they followed columns past ``keep`` (gone)."""
        if self._logits_len > keep:
            self.invalidate()

    # -- what the decoders read ---------------------------------------------------------
    def seen(self, node: Node) -> list[int]:
        """What the model saw up to ``node`` (the penalties' history): the path, or the
        assembled context under injection (``ContextKV.history``)."""
        return self.context.history(node)

    def refill(self, kids: list[Node], live: list[bool]) -> torch.Tensor:
        """Re-assemble a full injected context for ``kids`` (``ContextKV.refill``)."""
        return self.context.refill(kids, live)

    # -- bringing a path in ---------------------------------------------------------------
    def ensure(self, node: Node) -> torch.Tensor:
        """Make the working cache hold ``node``'s path (its window) in row 0 alone, and
        return the (V,) logits after it."""
        self.assembled = self.runner.context_for(node)
        if self.assembled is not None:
            return self.context.ensure(node, self.assembled)
        work = self.work
        if work.batch != 1:
            work.select_row(0, work.segments)
        target = self.window.layout(node)
        columns = sum(seg.size for seg in target)
        if columns == 0:
            raise EmptyEditError("the document is empty: write something to continue from")
        windowed = self.window.shift_for(node.end) > 0
        if windowed and self.runner.rope is not None and self.runner.rerotate_window:
            self._slide(node, target)
        keep = work.common_prefix_segments(target)
        if keep == columns and self._logits_len == columns and self._logits is not None:
            return self._logits
        keep = min(keep, columns - 1)
        work.truncate(keep)
        if self._logits_len > keep:
            self.invalidate()  # it followed columns that are gone
        plan: list[tuple[Node, int, int]] = []  # runs to compute, in order
        col = 0
        approx_before = False
        for seg in target:
            lo, hi = seg.lo, seg.hi
            if col + seg.size <= keep:
                col += seg.size
                approx_before = approx_before or seg.node.approx
                continue
            lo += max(0, keep - col)
            plain = not windowed or col < self.window.n_keep
            have = min(kv_len(seg.node.kv), hi) if plain and self.store_kv else 0
            if col + seg.size == columns:
                have = min(have, hi - 1)  # the final token is computed, for its logits
            if lo < have:
                self._compute(plan, approx_before)
                plan = []
                work.load(seg.node, lo, have)
                lo = have
            if lo < hi:
                plan.append((seg.node, lo, hi))
            col += seg.size
        logits = self._compute(plan, approx_before, windowed=windowed)
        self.remember(logits)
        if work.approx_from is not None and not node.approx:
            node.approx = True  # its window holds re-rotated KV: refresh makes it exact
            self.runner.emit(Event.UPDATE, node)
        path = node.path()
        self.runner.touch(path)
        self.runner.enforce_budget(path)
        return self._logits

    def _slide(self, node: Node, target: list[Segment]) -> None:
        """Re-rotate, rather than recompute, a window the buffer already holds at a
        smaller shift (a shorter path on the same branch, or no shift at all).

        The buffer's columns after ``n_keep`` hold this path's tokens from position
        ``n_keep + s`` on, and ``node``'s window starts ``d`` tokens later: forget the
        first ``d`` of them and move the rest down, keys re-rotated back by ``d``
        positions, as the generation's context shift does (fast, approximate: they
        were computed seeing the dropped tokens). Only the path's end past the buffer
        is then computed. ``node`` is flagged approximate; ``refresh`` recomputes.
        """
        work, window = self.work, self.window
        keep, shift = window.n_keep, window.shift_for(node.end)
        if work.length <= keep or work.common_prefix_segments(target) < keep:
            return  # the kept start differs (or is all there is): nothing to slide
        col, first = 0, None  # the buffer's first piece at or after column ``keep``
        for seg in work.segments:
            if col + seg.size > keep:
                first = (seg.node, seg.lo + max(0, keep - col))
                break
            col += seg.size
        starts, pos = {}, 0  # path position of each path node's first token
        for item in node.path():
            starts[id(item)] = pos
            pos += len(item.tokens)
        if first is None or id(first[0]) not in starts:
            return
        held = starts[id(first[0])] + first[1] - keep  # the buffer's shift
        drop = shift - held
        if held < 0 or drop <= 0:
            return
        layout = segments(node, 0, keep) + segments(node, keep + held, node.end)
        matched = work.common_prefix_segments([Segment(n, lo, hi) for n, lo, hi in layout])
        if matched - keep <= drop:
            return  # too little would be left after the drop
        work.truncate(matched)
        work.shift_columns(keep, drop, self.runner.rope)
        self.invalidate()

    def _compute(
        self, plan: list[tuple[Node, int, int]], approx_before: bool, windowed: bool = False
    ) -> torch.Tensor | None:
        """Compute the KV of ``plan``'s tokens in chunks, storing it on the nodes where it
        extends their stored prefix. Returns the (V,) logits after the last one."""
        if not plan:
            return None
        runner, work = self.runner, self.work
        first, lo, _hi = plan[0]
        wants_first = runner.keep_records and first.logprobs[lo] is None
        again = None  # a token computed again only for the logits that predict the plan
        if wants_first and self._logits_len != work.length and work.segments and not windowed:
            last = work.segments[-1]
            work.truncate(work.length - 1)
            again = (last.node, last.hi - 1, last.hi)
            plan = [again, *plan]
        ids = [t for n, lo, hi in plan for t in n.tokens[lo:hi]]
        owners = [(n, i) for n, lo, hi in plan for i in range(lo, hi)]
        # Tokens the model did not write (typed, pasted, imported) get their records --
        # log-probability and top alternatives -- from the logits this prefill computes
        # anyway; the row before each token predicts it.
        need = [runner.keep_records and n.logprobs[i] is None for n, i in owners]
        start_col = work.length
        logits = self.run_chunks(ids, owners, need)
        if not self.store_kv:
            return logits
        col = start_col
        for run in plan:
            node, lo, hi = run
            if run is again:  # same token, same place: its KV is the node's own again
                work.adopt(node, col - lo)
                col += 1
                continue
            plain = not windowed or col + (hi - lo) <= self.window.n_keep
            if plain and 0 < kv_len(node.kv) and lo <= kv_len(node.kv) <= hi:
                # The columns hold the node's stored KV too: keep one copy, the buffer's.
                work.adopt(node, col - lo)
            if plain and kv_len(node.kv) == lo:
                node.kv = work.extend(node.kv, col, col + hi - lo)  # (L, 2, H, T, D)
                # Computed on top of approximate KV, it is approximate too; computed
                # afresh on an exact path (after an eviction), it is exact.
                if node.approx != approx_before and (lo == 0 or approx_before):
                    node.approx = approx_before
                    runner.emit(Event.UPDATE, node)
            approx_before = approx_before or node.approx
            col += hi - lo
        return logits

    @staticmethod
    def _fill_records(
        rows: torch.Tensor,
        before: torch.Tensor | None,
        chunk: torch.Tensor,
        owners: list[tuple[Node, int]],
        need: list[bool],
        begin: int,
        filled: dict[int, Node],
    ) -> None:
        """Records of the chunk's tokens that need them. ``rows`` (q, V): logits after
        each chunk token; ``before`` (V,): logits before the first one, if known."""
        q = rows.shape[0]
        picks = [j for j in range(q) if need[begin + j] and (j or before is not None)]
        if not picks:
            return
        # Row j - 1 predicted token j; ``before`` predicted token 0. The rows are read
        # in place (a view when every later token needs its record, as typed text does),
        # never copied whole: a chunk's logits are (q, V), 100 MB for 512 tokens.
        parts = []
        later = [j for j in picks if j]
        if picks[0] == 0:
            parts.append(token_record_tensor(before[None], chunk[:1]))  # (1, 22)
        if later and later == list(range(1, q)):
            # In blocks of rows whose temporaries (a log-sum-exp's) stay in the CPU's
            # cache: 40% faster than the chunk at once, the same numbers.
            for lo in range(0, q - 1, RECORD_BLOCK):
                hi = min(lo + RECORD_BLOCK, q - 1)
                parts.append(token_record_tensor(rows[lo:hi], chunk[lo + 1 : hi + 1]))
        elif later:
            index = torch.tensor(later, device=rows.device)
            parts.append(token_record_tensor(rows[index - 1], chunk[index]))
        packed = parts[0] if len(parts) == 1 else torch.cat(parts)
        _, logprobs, alternatives = unpack_token_records(packed.tolist())  # one transfer
        for j, logprob, top in zip(picks, logprobs, alternatives):
            node, i = owners[begin + j]
            node.logprobs[i] = logprob
            node.top[i] = top
            filled[node.id] = node

    def run_chunks(
        self,
        ids: list[int],
        owners: list[tuple[Node, int]],
        need: list[bool],
        on_chunk: Callable[[int], None] | None = None,
    ) -> torch.Tensor:
        """Run ``ids`` after the buffer's columns in chunks of ``PREFILL_CHUNK``, each
        token committed to its owner ``(node, index)``; tokens whose ``need`` is set get
        their records from the logits (the row before a token predicts it). Reports
        progress, and stops between chunks when ``runner.interrupt`` is set
        (``PrefillCancelled``: the buffer keeps the columns computed so far -- its
        segments say whose they are, so the next ``ensure`` starts from them -- and the
        logits memo no longer matches it). ``on_chunk(count)`` hears each chunk's
        size. Returns the (V,) logits after the last token."""
        runner, work = self.runner, self.work
        before = self._logits if self._logits_len == work.length else None  # (V,) or None
        logits = None
        total = len(ids)
        filled: dict[int, Node] = {}
        try:
            for begin in range(0, total, PREFILL_CHUNK):
                if begin and runner.interrupt is not None and runner.interrupt.is_set():
                    self.invalidate()
                    raise PrefillCancelled()
                chunk = ids[begin : begin + PREFILL_CHUNK]
                wanted = any(need[begin : begin + len(chunk)])
                ids_t = torch.tensor([chunk], device=runner.device)  # (1, q)
                out = runner.forward(ids_t, keep=len(chunk) if wanted else 1)  # (1, keep, V)
                for node, i in owners[begin : begin + len(chunk)]:
                    work.commit(1, node, i)
                if wanted:
                    self._fill_records(out[0], before, ids_t[0], owners, need, begin, filled)
                logits = before = out[0, -1]
                if on_chunk is not None:
                    on_chunk(len(chunk))
                if runner.progress is not None and total > PREFILL_CHUNK:
                    runner.progress("prefill", min(begin + len(chunk), total), total)
        finally:
            for node in filled.values():
                runner.emit(Event.RECORDS, node)
        return logits

    # -- after a generation ---------------------------------------------------------------
    def store_generated(self, kids: list[Node], base: int, stored: list[int]) -> None:
        """Give each child the KV of its first ``stored[row]`` tokens, from buffer row
        ``row`` starting at column ``base``."""
        if not self.store_kv:
            return
        approx_before = any(n.approx for n in kids[0].parent.path())
        for row, kid in enumerate(kids):
            if stored[row] > 0:
                kid.kv = self.work.extend(None, base, base + stored[row], row=row)
            if approx_before and not kid.approx:
                kid.approx = True
                self.runner.emit(Event.UPDATE, kid)

    def shift_window(self, parent: Node, kids: list[Node], fed: torch.Tensor) -> None:
        """The cache is full mid-generation: drop ``n_discard`` columns after the first
        ``n_keep``. ``fed`` (B,) holds each row's token about to be fed.

        RoPE models keep the rest, re-rotated back by ``n_discard`` positions (fast,
        approximate, as llama.cpp does). Other models recompute the new window.
        """
        work, runner = self.work, self.runner
        keep, drop = self.window.n_keep, self.window.n_discard
        if runner.rope is not None:
            work.shift_columns(keep, drop, runner.rope)
            return
        # Absolute positions: rebuild the window of every row from its tokens.
        rows = [
            parent.path_tokens() + kid.tokens[:-1] if kid.tokens else parent.path_tokens()
            for kid in kids
        ]
        total = max(len(r) for r in rows)
        shift = self.window.shift_for(total + 1)
        tails = []
        for row, tokens in enumerate(rows):
            tail = tokens[keep + shift :]
            width = total - keep - shift
            tail = tail + [int(fed[row])] * (width - len(tail))
            tails.append(tail[:width])
        work.truncate(keep)
        layout = [Segment(n, lo, hi) for n, lo, hi in segments(kids[0], keep + shift, total)]
        out_ids = torch.tensor(tails, device=runner.device)  # (B, T)
        for begin in range(0, out_ids.shape[1], PREFILL_CHUNK):
            chunk = out_ids[:, begin : begin + PREFILL_CHUNK]
            runner.forward(chunk)
            work.commit(chunk.shape[1])
        work.segments = work.segments[:] + layout
