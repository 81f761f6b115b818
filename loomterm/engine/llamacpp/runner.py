"""The llama.cpp runner: a GGUF model in llama.cpp, in this process, behind the Loom.

The tree stays loomterm's; llama.cpp's KV cache holds its branches as sequences
(``slots``): the active path is one sequence, other branches are others, and paths that
share a prefix share its cells (``llama_memory_seq_cp`` in a unified cache copies no
data). The operations map onto llama.cpp's sequence API:

- ``prepare`` (a branch switch, a truncate, an append) finds the sequence holding the
  longest prefix of the path, copies that prefix into a free sequence when the rest of
  it is another branch worth keeping (``seq_cp``), cuts it (``seq_rm``) and evaluates
  only the tokens after it. Returns the (V,) logits; they go to loomterm's own sampler
  chain, so every sampler works as on the torch runner.
- ``decode`` samples ``n`` siblings together: each sibling is a sequence sharing the
  parent's cells, one token per sibling per ``llama_decode`` (or one decode per sibling
  a step, where llama.cpp's batch has cost more per token: ``batching``); each keeps its
  sequence afterwards, so switching between siblings computes nothing.
- a fast splice (``rerope``) moves the suffix's cells instead of evaluating them again
  (``splice``). The moved suffix is flagged approximate, and so is
  anything computed after it, until ``refresh`` recomputes it exactly. Exact operations
  give what a fresh evaluation of the same tokens gives.

The context starts small (``FIRST_CELLS``) and grows with what its sequences hold:
when the cache is full it is made again at least twice as large, every sequence moved
over as it was (``grow``), up to its largest size (twice ``n_ctx``, sized down to fit
the budget, never below the context window). Past that, or when every sequence is
taken, the least recently used sequence leaves it: its cells are copied off the context
(``llama_state_seq_get_data``) and parked (``parked``), and coming back to that branch
puts them back (``llama_state_seq_set_data``) instead of evaluating it again.
``kv_budget`` caps both together, as the torch runner's ``--kv-budget`` caps its node
KV and working buffer: the context's cells are allocated whole and count, at their
size now, as ``KVBytes.working``; the parked copies are node KV (``KVBytes.nodes``)
within what the context leaves at its largest, the least recently used dropped first
when they would not fit.
They are not tensors on the nodes (``node_kv`` stays off: no KV snapshots). Threads:
``threads`` (default: physical cores less one, ``engine.threads``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import torch

from loomterm.engine.breakers import BreakerTable
from loomterm.engine.events import Event
from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.kv.resident import KVBytes
from loomterm.engine.kv.window import MIN_CTX, Window
from loomterm.engine.llamacpp.batching import BatchCosts
from loomterm.engine.llamacpp.context import CELL_BLOCK, LlamaContext, cells_for
from loomterm.engine.llamacpp.parked import Parked, ParkedStore, park
from loomterm.engine.llamacpp.siblings import decode_siblings
from loomterm.engine.llamacpp.slots import Slot, Want, cells_held, matched
from loomterm.engine.llamacpp.splice import fast_splice, old_path
from loomterm.engine.llamacpp.text import LlamaTokenText
from loomterm.engine.local.budget import default_budget, parse_size
from loomterm.engine.runner import Capabilities, Progress, Runner
from loomterm.engine.sample.chain import SamplingParams
from loomterm.engine.sample.penalties import DryBreakers
from loomterm.errors import ContextError, EmptyEditError, InputError, PrefillCancelled
from loomterm.tree import Node

SEQUENCES = 8  # llama.cpp sequences: cached branches, and siblings per batch
FIRST_CELLS = 4096  # a new context's cells: it grows when the paths need more (``grow``)
RESTORE_GAIN = 16  # a parked copy comes back when it serves this many more tokens
WHY_NOT = (
    (
        "node_kv",
        "llama.cpp keeps the KV in its own cache, one sequence per cached branch, and parks "
        "evicted branches as copies of their cells under --kv-budget, not as tensors on the "
        "nodes: no KV snapshots",
    ),
    ("drafting", "drafted decoding runs on the torch runner only"),
    ("prompt_logprobs", "llama.cpp is asked for the last position's logits only"),
)


class LlamaCppRunner(Runner):
    """A GGUF model run by llama.cpp in this process. See the module docstring.

    Attributes:
        llama: The model and context (``context.LlamaContext``).
        slots: The sequences and the paths they hold.
        window: The context window geometry (past ``n_ctx``, as the remote runner).
        evictions: Sequences dropped to make room.
    """

    def __init__(
        self,
        path: str | Path,
        n_ctx: int | None = None,
        threads: int | None = None,
        cells: int | None = None,
        sequences: int = SEQUENCES,
        kv_budget: int | str | None = None,
        first_cells: int = FIRST_CELLS,
    ) -> None:
        path = Path(path).expanduser()
        if not path.is_file():
            raise InputError(f"no GGUF file at {path}")
        if n_ctx is not None and n_ctx < MIN_CTX:
            raise ContextError(f"n_ctx {n_ctx} is too small: use at least {MIN_CTX} tokens")

        budget = parse_size(kv_budget) or default_budget(torch.device("cpu"))

        def size(trained: int, per_cell: int) -> tuple[int, int]:
            most = cells_for(cells or 2 * (n_ctx or trained), n_ctx or trained, per_cell, budget)
            return min(first_cells, most), most

        self.llama = LlamaContext(path, size, n_seq=sequences, threads=threads)
        n_ctx = n_ctx or self.llama.n_ctx_train
        self.kv_budget = budget
        self.bytes_per_cell = self.llama.kv_bytes_per_cell()
        # The copies get what the context leaves at its largest: growing never drops one.
        self.parked = ParkedStore(budget - self.llama.max_cells * self.bytes_per_cell)
        self.llama.make_room = self._make_room
        self.path = path.resolve()
        self.n_ctx = n_ctx
        self.window = Window.for_context(n_ctx)
        self.name = path.stem  # the file names the model and its quantization
        self.threads = self.llama.threads
        self.backend = "llama.cpp"
        plural = "s" if self.threads != 1 else ""
        self.where = f"cpu · llama.cpp ({self.threads} thread{plural})"
        self.codec = LlamaTokenText(self.llama)
        self.vocab_size = self.llama.vocab_size
        self.eos_ids = frozenset(t for t in self.codec.special_ids if self.llama.is_eog(t))
        self.slots = [Slot(seq) for seq in range(self.llama.n_seq)]
        self.batching = BatchCosts()  # siblings: one batch a step, or one decode each
        self.clock = 0
        self.evictions = 0
        self.kept_copies = 0  # old paths kept whole across a fast splice (state_seq)
        self.restores = 0  # parked branches put back into the cache
        self.growths = 0  # times the context grew (``grow``)
        self.grow_seconds = 0.0  # what those took, together
        self.moves: list[tuple[Node, int, int, int]] = []  # a fast splice's suffix pieces
        self._breakers = BreakerTable(self.codec, self.vocab_size, self.encode)
        self._fingerprint: dict[str, str] | None = None
        self.capabilities = capabilities_of(self.llama)

    def attach(self, tree, emit) -> None:
        """A (new) tree: approximate cells belonged to the old tree's nodes, so they go;
        exact ones depend on tokens only and serve the new tree too."""
        for slot in self.slots:
            first = next((p for p, owner in enumerate(slot.owners) if owner is not None), None)
            if first is not None:
                self.llama.seq_rm(slot.seq, first)
                slot.cut(first)
        self.parked.cut_approx()
        super().attach(tree, emit)

    # -- identity and text -------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The GGUF file, its digest and the vocabulary's, and the backend."""
        if self._fingerprint is None:
            from loomterm.engine.models.fingerprint import file_sha256

            vocab = hashlib.sha256()
            for token in range(self.vocab_size):
                vocab.update(self.codec.token_bytes(token) + b"\0")
            config = f"{self.name}|{self.llama.n_ctx_train}|{self.vocab_size}"
            self._fingerprint = {
                "name": self.name,
                "config": hashlib.sha256(config.encode()).hexdigest(),
                "weights": file_sha256(self.path),
                "tokenizer": vocab.hexdigest(),
            }
        return {
            "name": self.name,
            "source": str(self.path),
            "fingerprint": dict(self._fingerprint),
            "dtype": "gguf",
            "backend": "llama.cpp",
        }

    @property
    def fingerprint(self) -> dict[str, str]:
        """The model's fingerprint (``identity``), as a loaded model's."""
        return self.identity()["fingerprint"]

    def encode(self, text: str, at_start: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise InputError("text must be a string")
        return self.llama.tokenize(text, at_start) if text else []

    def dry_breakers(self, params: SamplingParams) -> DryBreakers | None:
        """DRY's sequence breakers as token ids (None when DRY is off), kept."""
        return self._breakers.for_params(params)

    # -- what a path asks for ----------------------------------------------------------
    def want(self, node: Node, reserve: int = 0) -> Want:
        """The sequence for ``node``: its path (positions tied to nodes), its window past
        ``n_ctx``, or the sequence an injected context assembles."""
        if (assembled := self.context_for(node, reserve)) is not None:
            return Want(list(assembled.tokens), plain=False)
        tokens = node.path_tokens()
        if len(tokens) + reserve > self.n_ctx:
            if reserve >= self.n_ctx - self.window.n_keep:
                raise ContextError(
                    f"{reserve} new tokens do not fit the context of {self.n_ctx} tokens"
                )
            shift = self.window.shift_for(len(tokens) + reserve)
            keep = self.window.n_keep
            return Want(tokens[:keep] + tokens[keep + shift :], plain=False)
        ids: list[int] = []
        approx: list[bool] = []
        for item in node.path():
            ids.extend([item.id] * len(item.tokens))
            approx.extend([item.approx] * len(item.tokens))
        return Want(tokens, ids, approx)

    # -- bringing a path into a sequence -----------------------------------------------
    def prepare(self, node: Node) -> torch.Tensor:
        """Make a sequence hold ``node``'s path; return the (V,) logits after it."""
        want = self.want(node)
        slot, logits = self.bring(want, node)
        self._settle_flags(node, slot, want)
        return logits

    def bring(self, want: Want, node: Node) -> tuple[Slot, torch.Tensor]:
        """A slot holding ``want`` and the logits after it (see the module docstring)."""
        if not want.tokens:
            raise EmptyEditError("the document is empty: write something to continue from")
        self.clock += 1
        moves, self.moves = self.moves, []
        if moves and want.plain:
            done = fast_splice(self, moves, want, node)
            if done is not None:
                return done
        best = max(self.slots, key=lambda s: (matched(s, want), s.used))
        m = matched(best, want)
        copy, served = self.parked.best(want)
        if (
            copy is not None
            and served > m
            and served >= m + min(RESTORE_GAIN, len(want.tokens) - m)
        ):
            back = self._restore(copy, busy={best.seq})
            if back is not None:
                best, m = back, served
        if m == len(want.tokens) == len(best) and best.logits is not None:
            best.used = self.clock
            return best, best.logits
        keep = min(m, len(want.tokens) - 1)
        if len(best) <= m:
            target = best  # nothing past the match is lost
        else:
            target = self.free_slot(busy={best.seq})
            self.llama.seq_cp(best.seq, target.seq, 0, keep)
            best.copy_to(target, keep)
        return target, self._evaluate(target, want, keep)

    def _evaluate(self, slot: Slot, want: Want, keep: int) -> torch.Tensor:
        """Cut ``slot`` to ``keep`` cells and evaluate the rest of ``want`` into it."""
        self.llama.seq_rm(slot.seq, keep)
        slot.cut(keep)
        slot.used = self.clock
        rest = want.tokens[keep:]
        approx = slot.approx_before(keep)
        owners = want.ids[keep:] if approx and want.plain else [None] * len(rest)
        try:
            logits = self.llama.decode(rest, slot.seq, keep, busy={slot.seq})
        except PrefillCancelled as stopped:
            done = stopped.evaluated
            slot.extend(rest[:done], owners[:done])
            raise
        slot.extend(rest, owners)
        slot.logits = logits
        return logits

    def _settle_flags(self, node: Node, slot: Slot, want: Want) -> None:
        """Flag each path node approximate exactly when its cells are."""
        approx: set[int] = set()
        if want.plain:  # else everything was evaluated from tokens alone: exact
            owners = slot.owners
            approx = {want.ids[p] for p in range(len(want.ids)) if owners[p] is not None}
        for item in node.path():
            flag = item.id in approx
            if item.tokens and item.approx != flag:
                item.approx = flag
                self.emit(Event.UPDATE, item)

    def free_slot(self, busy: set[int]) -> Slot:
        """An empty slot, else the least recently used one outside ``busy``, emptied."""
        empty = [s for s in self.slots if not s.tokens and s.seq not in busy]
        if empty:
            return empty[0]
        victims = [s for s in self.slots if s.seq not in busy]
        if not victims:
            raise InputError(f"more than {len(self.slots)} sequences at once")
        victim = min(victims, key=lambda s: s.used)
        self._drop(victim)
        return victim

    def _drop(self, slot: Slot) -> None:
        """Empty ``slot`` (an eviction): its cells are parked first (``parked``)."""
        park(self.parked, slot, self.slots, self.llama.seq_save)
        self.llama.seq_rm(slot.seq, -1, -1)
        slot.cut(0)
        self.evictions += 1

    def _restore(self, copy: Parked, busy: set[int]) -> Slot | None:
        """Put ``copy`` back into a free sequence (making room in the cache as a full
        cache does); the slot, or None when it cannot come back."""
        self.parked.take(copy)  # out of the store first: an eviction below may park
        record = copy.record
        target = self.free_slot(busy)
        busy = busy | {target.seq}
        need = self.cells_in_use() + copy.cells
        while need > self.llama.cells and not self.grow(need) and self._make_room(busy):
            need = self.cells_in_use() + copy.cells  # room first: a failed restore is logged
        while not self.llama.seq_restore(copy.data, target.seq):
            if not self._make_room(busy):
                self.llama.seq_rm(target.seq, -1, -1)
                return None
        self.llama.seq_rm(target.seq, len(record))  # cells past a cut record
        target.tokens, target.owners = list(record.tokens), list(record.owners)
        target.logits, target.used = None, self.clock
        self.restores += 1
        return target

    def _make_room(self, busy: set[int]) -> bool:
        """The cache is full: grow the context (``grow``) while it is below its largest
        size, else drop the least recently used sequence outside ``busy``."""
        if self.grow(self.llama.cells + 1):
            return True
        victims = [s for s in self.slots if s.tokens and s.seq not in busy]
        if not victims:
            return False
        self._drop(min(victims, key=lambda s: s.used))
        return True

    # -- fast splice -------------------------------------------------------------------
    def can_move(self, pieces: list[tuple[Node, int, int]]) -> bool:
        """Whether a sequence holds the old path through the suffix, so a fast splice
        can move its cells (plain paths only)."""
        if not pieces or not self.llama.can_shift:
            return False
        last, _lo, hi = pieces[-1]
        if self.context_for(last) is not None or last.start + hi > self.n_ctx:
            return False
        old = old_path(self, last, last.start + hi)
        return any(matched(slot, old) == len(old.tokens) for slot in self.slots)

    def moved_kv(self, source: Node, lo: int, hi: int, delta: int) -> None:
        """Note one suffix piece of a fast splice; the next ``prepare`` of the spliced
        path moves the cells (``seq_rm`` + ``seq_add``) instead of evaluating them."""
        self.moves.append((source, lo, hi, delta))
        return None

    # -- tree changes ------------------------------------------------------------------
    def split(self, head: Node, tail: Node, offset: int) -> None:
        """Approximate cells of ``tail``'s first ``offset`` tokens now belong to ``head``."""
        boundary = head.end
        for slot in self.slots:
            for p in range(min(boundary, len(slot.owners))):
                if slot.owners[p] == tail.id:
                    slot.owners[p] = head.id
        self.parked.rename(tail.id, head.id, boundary)

    def forget(self, node: Node) -> None:
        """Drop approximate cells that belong to ``node`` (exact ones stay: they depend
        on tokens only)."""
        for slot in self.slots:
            first = next((p for p, o in enumerate(slot.owners) if o == node.id), None)
            if first is not None:
                self.llama.seq_rm(slot.seq, first)
                slot.cut(first)
        self.parked.cut_owned(node.id)

    def refresh(self, node: Node) -> None:
        """Evaluate ``node``'s path again where its cells are approximate."""
        path = node.path()
        if not any(item.approx for item in path):
            return
        for item in path:
            if item.approx:
                self.forget(item)
        self.prepare(node)

    # -- long reads: progress and escape -------------------------------------------------
    # The context evaluates; the Loom sets these on the runner (``Loom.progress``,
    # ``Loom.interrupt``): without them a long read said nothing and could not be stopped.
    @property
    def progress(self) -> Progress | None:
        return self.llama.progress

    @progress.setter
    def progress(self, value: Progress | None) -> None:
        self.llama.progress = value

    @property
    def interrupt(self) -> threading.Event | None:
        return self.llama.interrupt

    @interrupt.setter
    def interrupt(self, value: threading.Event | None) -> None:
        self.llama.interrupt = value

    # -- generation --------------------------------------------------------------------
    def decode(self, request: GenerateRequest, writer: NodeWriter) -> GenerateResult:
        if request.banned:
            raise InputError("banned strings need the torch runner (--backend torch)")
        clock = time.perf_counter()
        reserve = max(1, min(request.max_new_tokens, self.n_ctx // 2))
        want = self.want(request.node, reserve)
        slot, logits = self.bring(want, request.node)
        self._settle_flags(request.node, slot, want)
        prefill = time.perf_counter() - clock
        max_new = min(request.max_new_tokens, self.n_ctx - len(want.tokens))
        if max_new <= 0 or request.cancelled:
            return GenerateResult(prefill_seconds=prefill)
        result = decode_siblings(self, request, writer, want, slot, logits, max_new)
        result.prefill_seconds = prefill
        result.decode_seconds = time.perf_counter() - clock - prefill
        return result

    def row_slots(self, parent: Slot, n: int) -> list[Slot]:
        """``n`` slots for siblings: ``parent`` and copies of it sharing its cells."""
        rows = [parent]
        busy = {parent.seq}
        for _ in range(n - 1):
            slot = self.free_slot(busy)
            self.llama.seq_cp(parent.seq, slot.seq)
            parent.copy_to(slot, len(parent))
            slot.used = self.clock
            busy.add(slot.seq)
            rows.append(slot)
        return rows

    # -- memory and the rest -----------------------------------------------------------
    @property
    def context_bytes(self) -> int:
        """Bytes the context's cells take now (llama.cpp allocates them whole)."""
        return self.llama.cells * self.bytes_per_cell

    def grow(self, need: int) -> bool:
        """Make the context hold ``need`` cells: True when it does (already, or after
        growing), False when that is past its largest size (``n_ctx`` twice within the
        budget) or llama.cpp cannot allocate it (then it stays this size from now on).

        It grows to at least twice its cells, so a long document grows it a few times,
        not once per chunk; every sequence moves over (``LlamaContext.grow``): no branch
        is lost and the logits do not change."""
        llama = self.llama
        if need <= llama.cells:
            return True
        if need > llama.max_cells:
            return False
        target = min(llama.max_cells, max(2 * llama.cells, -(-need // CELL_BLOCK) * CELL_BLOCK))
        clock = time.perf_counter()
        if not llama.grow(target):
            llama.max_cells = llama.cells  # llama.cpp cannot allocate more: evict instead
            return False
        self.grow_seconds += time.perf_counter() - clock
        self.growths += 1
        return True

    def kv_bytes(self) -> KVBytes:
        """The context's cells now, allocated whole, as ``working``; parked copies as
        ``nodes`` (see the module docstring). Their total stays within ``kv_budget``."""
        return KVBytes(nodes=self.parked.nbytes, working=self.context_bytes)

    def cells_in_use(self) -> int:
        """Cells the sequences hold (a prefix shared by ``seq_cp`` counted once)."""
        return cells_held(self.slots)

    def close(self) -> None:
        self.llama.close()


def capabilities_of(llama: LlamaContext) -> Capabilities:
    """What the runner can do with this model (``WHY_NOT``: what it cannot, and why)."""
    why_not: tuple[tuple[str, str], ...] = WHY_NOT
    if not llama.can_shift:
        why_not += (("rerope", "this model's cache cannot move positions: splices are exact"),)
    return Capabilities(
        rerope=llama.can_shift,
        full_logits=True,
        batched_siblings=True,
        healing=True,
        why_not=why_not,
    )
