"""The local runner: a transformers model in this process, with the KV on the nodes.

It owns what touches the model: the forward pass into the working cache (with one
retry after freeing cached branches when memory runs out), fresh KV of a token run at
any offset, the KV geometry, the proven RoPE convention (re-rotation), the tokenizer,
the context window, and the memory budget over the nodes' KV. ``PathCache`` keeps the
working cache in step with the tree; ``decode.plain`` and ``decode.drafted`` are its decoders.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from loomterm.engine.breakers import BreakerTable
from loomterm.engine.decode.banned import banned_decode
from loomterm.engine.decode.draft_sources import DraftSources
from loomterm.engine.decode.draft_tree import DraftConfig
from loomterm.engine.decode.drafted import KeptDrafting, drafted_decode, drafting_config
from loomterm.engine.decode.job import DecodeJob, DecodeModel
from loomterm.engine.decode.plain import plain_decode
from loomterm.engine.events import Event
from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.kernels import attention
from loomterm.engine.kernels.step import make_decode_step
from loomterm.engine.kv.cache import WorkingCache, resident_bytes
from loomterm.engine.kv.resident import KVBytes
from loomterm.engine.kv.rope import RopeSpec, rerotate_kv
from loomterm.engine.kv.window import MIN_CTX, Window
from loomterm.engine.local import budget, model_facts, probes
from loomterm.engine.local.path_cache import PathCache
from loomterm.engine.runner import Runner
from loomterm.engine.sample.chain import DryBreakers, SamplingParams
from loomterm.engine.text import TokenText
from loomterm.errors import ContextError, InputError, LoomError, ModelLoadError
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine.context import Assembly
    from loomterm.engine.models.load import LoadedModel

log = logging.getLogger("loomterm")
DECODE_STEP = os.environ.get("LOOMTERM_DECODE_STEP", "1") not in ("0", "off", "false")


class LocalRunner(Runner):
    """A loaded transformers model behind the Loom. See the module docstring.

    Attributes:
        loaded: The model, tokenizer, device, dtype and fingerprint.
        work: The working cache (``kv.cache.WorkingCache``) of the active path.
        cache: The bookkeeping between the working cache and the tree.
        window: The context window geometry.
        rope: The model's proven RoPE convention, or None (fast splice unavailable).
        kv_budget: Cap on resident KV bytes, the working buffer included.
        evictions: How many times a node's KV was dropped to stay under the cap.
        attention_note: Why loomterm's in-place attention is off (None when it is on).
        keep_records: Give tokens the model did not write (typed, imported) their
            log-probability and top alternatives from the prefill's logits.
        rerotate_window: On a RoPE model, move to a path whose window starts later by
            re-rotating the columns the buffer holds (approximate, flagged) rather
            than recomputing the window.
    """

    def __init__(
        self, loaded: LoadedModel, n_ctx: int | None = None, kv_budget: int | str | None = None
    ) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.dtype = loaded.dtype
        self.name = loaded.name
        # The precision joins the device on the status bar when not the device's usual.
        self.precision, self.quantized, self._precision_label = model_facts.precision_note(loaded)
        # torch's CPU threads are the calling thread's (OpenMP keeps them per thread): the
        # runner keeps its own count and sets it in ``context``, on whichever thread runs.
        self.threads: int | None = torch.get_num_threads() if self.device.type == "cpu" else None
        self.codec = TokenText(self.tokenizer)
        config = self.model.config.get_text_config(decoder=True)
        self.vocab_size = model_facts.vocab_size(self.model)
        self.max_positions = model_facts.max_positions(config)
        self.eos_ids = frozenset(model_facts.eos_ids(self.model, self.tokenizer))
        self._cache_kw = model_facts.cache_keyword(self.model)
        self.attention_note = attention.install(self.model)
        if self.attention_note:
            log.warning(self.attention_note)
        found = self._probe()
        self.rope: RopeSpec | None = found.rope
        self.n_ctx = self._check_ctx(n_ctx)
        self.window = Window.for_context(self.n_ctx)
        self.work = WorkingCache(*found.geometry, self.dtype, self.device, self.n_ctx)
        self.cache = PathCache(self)
        # The single-token decode step without the generic model stack (``engine.kernels.step``;
        # a CUDA graph on GPUs), for the models it knows; None: ``forward`` does it.
        self.step = make_decode_step(self.model, self.work) if DECODE_STEP else None
        self.kv_budget = budget.parse_size(kv_budget) or budget.default_budget(self.device)
        self.lru = budget.LruClock()
        self.evictions = 0
        self.keep_records = True  # typed tokens get log-probabilities from their prefill
        # Past n_ctx, re-rotate a window the buffer holds at a smaller shift instead of
        # recomputing it (approximate, flagged; ``PathCache._slide``). False: recompute.
        self.rerotate_window = True
        self._breakers = BreakerTable(self.codec, self.vocab_size, self.encode)
        # What drafted decoding keeps across generations: the last parent's draft
        # sources and whether drafting pays, per regime (``decode.draft_ledger.Ledger``).
        self.drafting = KeptDrafting()
        self.draft_limit = model_facts.draft_limit(config)
        self.capabilities = model_facts.capabilities(config, self.rope, self.attention_note)

    def _probe(self) -> probes.Probed:
        """The KV geometry and RoPE convention, read off three forward passes (kept
        per model and setting: ``local.probes``)."""
        try:
            return probes.probed(
                self.loaded, self.model, self.fresh_kv, self.vocab_size, self.attention_note
            )
        except (RuntimeError, ValueError, TypeError, IndexError, AttributeError) as exc:
            # A family ``models.support`` does not know whose cache is not one key and
            # one value per token and layer: one line, not a traceback from transformers.
            log.debug("probing %s failed", self.name, exc_info=True)
            raise ModelLoadError(
                f"cannot run {self.name}: its key/value cache is not one key and value per "
                f"token and layer, which loomterm branches ({type(exc).__name__})"
            ) from None

    def _check_ctx(self, n_ctx: int | None) -> int:
        if n_ctx is None:
            return self.max_positions
        if n_ctx < MIN_CTX:
            raise ContextError(f"n_ctx {n_ctx} is too small: use at least {MIN_CTX} tokens")
        if self.rope is None and n_ctx > self.max_positions:
            raise ContextError(
                f"n_ctx {n_ctx} is larger than this model's {self.max_positions} positions"
            )
        return n_ctx

    def attach(self, tree, emit) -> None:
        super().attach(tree, emit)
        if self.capabilities.node_kv:
            # Foreseen nodes (``Tree.foreseen``) hold KV too: it must not be overwritten under them.
            self.work.owners = lambda: [*tree.nodes.values(), *tree.foreseen.values()]

    def without_node_kv(self) -> None:
        """Run beside another local runner that keeps the nodes' KV (``engine.loom.registry``):
        never read, write or evict ``node.kv``; keep only this runner's working cache,
        reused by common prefix, and compute the rest. Splices are then exact, and typed
        text's log-probabilities are left to the KV owner. Call before ``attach``."""
        why = "another local model keeps this tree's node KV; this one uses its working cache"
        reasons = dict(self.capabilities.why_not)
        reasons.update(node_kv=why, rerope="without node KV there is nothing to move")
        self.capabilities = replace(
            self.capabilities, node_kv=False, rerope=False, why_not=tuple(reasons.items())
        )
        self.cache.store_kv = False
        self.keep_records = False
        self.work.owners = None

    # -- identity and text -------------------------------------------------------------
    backend = "torch"

    @property
    def where(self) -> str:
        """The device, the backend (and its threads on the CPU) and, when not the
        device's usual, the precision: ``cpu · torch (1 thread) · int8 (float32)``."""
        threads = self.threads
        count = f" ({threads} thread{'s' if threads != 1 else ''})" if threads else ""
        return f"{self.device} · torch{count}{self._precision_label}"

    def identity(self) -> dict[str, Any]:
        return self.loaded.identity()

    def encode(self, text: str, at_start: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise InputError("text must be a string")
        return list(self.tokenizer(text, add_special_tokens=at_start)["input_ids"])

    # -- the model ---------------------------------------------------------------------
    @contextlib.contextmanager
    def context(self, assembly: Assembly | None = None) -> Iterator[None]:
        """No autograd: KV buffers are created and updated in place under inference
        mode, so every operation must run inside it. ``assembly``: ``Runner.context``."""
        if self.threads and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        with self.assembling(assembly), torch.inference_mode():
            # Softmax tails underflow into subnormal floats, which x86 CPUs multiply up
            # to 100x slower; flush them to zero during engine work only (the mode is
            # per thread and would otherwise leak into the caller's code).
            flush = self.device.type == "cpu" and torch.set_flush_denormal(True)
            try:
                yield
            finally:
                if flush:
                    torch.set_flush_denormal(False)

    def kv_geometry(self) -> tuple[int, int, int]:
        """(layers, KV heads, head dim), read off one real forward pass."""
        kv = self.fresh_kv([0], 0)
        return kv.shape[0], kv.shape[2], kv.shape[4]

    @torch.inference_mode()
    def fresh_kv(self, tokens: list[int], offset: int) -> torch.Tensor:
        """KV of ``tokens`` at positions ``offset..`` with nothing before: (L, 2, H, T, D)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        ids = torch.tensor([tokens], device=self.device)
        positions = torch.arange(offset, offset + len(tokens), device=self.device)[None]
        self.model(input_ids=ids, position_ids=positions, use_cache=True, **{self._cache_kw: cache})
        layers = [(layer.keys[0], layer.values[0]) for layer in cache.layers]
        return torch.stack([torch.stack(kv) for kv in layers])  # (L, 2, H, T, D)

    @torch.inference_mode()
    def forward(
        self,
        ids: torch.Tensor,
        keep: int = 1,
        positions: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``ids`` (B, q) after the working cache's columns, writing their KV in
        place at columns ``length..length+q``. Returns logits of the last ``keep``
        positions: (B, keep, V). The caller commits the columns it keeps.

        ``positions`` (B, q) overrides the default ``length + arange(q)``, and
        ``attention_mask`` (B, 1, q, length+q), boolean, True = may attend, replaces
        the causal mask: drafted decoding verifies a tree of guesses this way.
        """
        batch, q = ids.shape
        self.work.prepare(q, batch)
        if positions is None:
            positions = torch.arange(self.work.length, self.work.length + q, device=self.device)
            positions = positions[None].expand(batch, q)
        kwargs = dict(input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=keep)
        kwargs[self._cache_kw] = self.work
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        try:
            return self.model(**kwargs).logits  # (B, keep, V)
        except torch.OutOfMemoryError:
            # Free every branch's KV but the ones being worked on, then try once more.
            self._free_for_oom()
            try:
                return self.model(**kwargs).logits
            except torch.OutOfMemoryError:
                raise LoomError(
                    f"out of memory on {self.device.type} even after freeing cached branches: "
                    "generate fewer siblings, or lower --n-ctx or --kv-budget"
                ) from None

    def decode_step(self, fed: torch.Tensor) -> torch.Tensor:
        """``forward(fed[:, None])`` for one token per row at the working cache's end:
        (B, 1, V) logits, the new column pending. Runs ``engine.kernels.step`` (a CUDA graph on
        a GPU) when the model has one, else the generic forward."""
        if self.step is None:
            return self.forward(fed[:, None])
        try:
            return self.step(fed)
        except torch.OutOfMemoryError:
            self._free_for_oom()
            return self.forward(fed[:, None])

    def verify_block(
        self, ids: list[int], offsets: list[int], mask: torch.Tensor | None, keep: int
    ) -> torch.Tensor:
        """One row's block of drafted tokens after the working cache's columns
        (``DecodeStep.block``: positions ``length + offsets``, ``mask`` (q, q) among the
        block, None: causal): (keep, V) logits, the block's columns pending."""
        try:
            return self.step.block(ids, offsets, mask, keep)
        except torch.OutOfMemoryError:
            self._free_for_oom()
            device, length, q = self.device, self.work.length, len(ids)
            positions = torch.tensor([offsets], device=device) + length
            full = torch.ones(1, 1, q, length + q, dtype=torch.bool, device=device)
            if mask is not None:
                full[0, 0, :, length:] = mask.to(device)
            else:
                full[0, 0, :, length:] = torch.ones(q, q, dtype=torch.bool).tril_()
            ids_t = torch.tensor([ids], device=device)
            return self.forward(ids_t, keep=keep, positions=positions, attention_mask=full)[0]

    def _free_for_oom(self) -> None:
        if not self.capabilities.node_kv:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return
        active = {seg.node.id for seg in self.work.segments}
        for node in list(self.tree.nodes.values()):
            if node.kv is not None and node.id not in active:
                self.evict(node)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def dry_breakers(self, params: SamplingParams) -> DryBreakers | None:
        """DRY's sequence breakers as this tokenizer's ids (None when DRY is off).
        Resolving scans the vocabulary once per breaker list; it is kept."""
        return self._breakers.for_params(params)

    # -- what the Loom asks --------------------------------------------------------------
    def prepare(self, node: Node) -> torch.Tensor:
        return self.cache.ensure(node)

    @property
    def draft_sources(self) -> DraftSources | None:
        """The draft sources kept from the last drafted generation (None: none yet)."""
        return self.drafting.sources

    def decode(self, request: GenerateRequest, writer: NodeWriter) -> GenerateResult:
        clock = time.perf_counter()
        logits = self.cache.ensure(request.node)  # (V,)
        prefill = time.perf_counter() - clock
        job = self.decode_job(request, writer, logits)
        if request.banned:  # going back cannot happen inside a batch or a drafted block
            result = banned_decode(job)
        elif (config := self.drafting_for(request)) is not None:
            nodes = self.tree.nodes if self.tree is not None else {}
            result = drafted_decode(job, config, self.drafting, nodes)
        else:
            result = plain_decode(job)
        result.prefill_seconds = prefill
        result.decode_seconds = time.perf_counter() - clock - prefill
        return result

    @property
    def decode_model(self) -> DecodeModel:
        """What every decoder is given of this runner (``decode.job``), read afresh
        for each generation."""
        return DecodeModel(
            work=self.work,
            kv=self.cache,
            forward=self.forward,
            decode_step=self.decode_step,
            verify_block=self.verify_block if self.step is not None else None,
            codec=self.codec,
            eos_ids=self.eos_ids,
            device=self.device,
            n_ctx=self.n_ctx,
            rerotates=self.rope is not None,
            quantized=self.quantized,
            touch=self.touch,
            enforce_budget=self.enforce_budget,
        )

    def decode_job(
        self, request: GenerateRequest, writer: NodeWriter, logits: torch.Tensor
    ) -> DecodeJob:
        """What a decoder is given for ``request``: ``logits`` (V,) after its node."""
        return DecodeJob(
            request=request,
            writer=writer,
            logits=logits,
            model=self.decode_model,
            shift=self.window.shift_for(request.node.end),
            dry_breakers=self.dry_breakers(request.sampling),
        )

    def drafting_for(self, request: GenerateRequest) -> DraftConfig | None:
        """The draft settings ``decode`` would use for ``request`` with the cache as it
        is now (None: it would decode plainly)."""
        if request.banned or not self.capabilities.drafting:
            return None
        model = self.decode_model
        if self.draft_limit is not None and self.draft_limit < model.n_ctx:
            # Drafts only while the whole generation stays inside one window.
            model = replace(model, n_ctx=self.draft_limit)
        return drafting_config(request, model)

    def moved_kv(self, source: Node, lo: int, hi: int, delta: int) -> torch.Tensor:
        assert self.rope is not None, "moved_kv needs the rerope capability"
        return rerotate_kv(source.kv[:, :, :, lo:hi], delta, self.rope)  # (L, 2, H, T, D)

    def can_move(self, nodes: list[tuple[Node, int, int]]) -> bool:
        """Whether every piece's KV is stored, so a fast splice can move it."""
        return all(n.kv is not None and n.kv.shape[3] >= hi for n, _lo, hi in nodes)

    def split(self, head: Node, tail: Node, offset: int) -> None:
        self.work.rename_split(head, tail, offset)

    def refresh(self, node: Node) -> None:
        path = node.path()
        first = next((i for i, n in enumerate(path) if n.approx), None)
        if not self.capabilities.node_kv:
            first = None  # the node KV and its flags are the KV owner's
        windowed = node.end > self.n_ctx
        if first is None and not windowed:
            return
        if first is not None:
            self.work.forget(path[first])
            for item in path[first:]:
                item.kv = None
                item.approx = False
                self.emit(Event.UPDATE, item)
        if windowed:  # the window's re-rotated columns are rebuilt from the kept prefix
            self.work.truncate(min(self.work.length, self.window.n_keep))
        self.cache.invalidate()
        self.cache.ensure(node)

    def forget(self, node: Node) -> None:
        self.work.forget(node)
        self.cache.invalidate()

    def rewrite(self, node: Node, keep: int) -> None:
        if self.cache.store_kv and node.kv is not None:
            # A view of the unchanged tokens' columns, taken before the buffer is cut
            # there (a view that ends at the cut is not copied).
            node.kv = node.kv[:, :, :, :keep] if keep else None  # (L, 2, H, keep, D)
        # The logits memo stays: ``ensure`` drops it if it followed columns cut here,
        # and an append at the node's end still starts from it.
        self.work.forget_from(node, keep)

    def evict(self, node: Node) -> bool:
        if node.kv is None or not self.capabilities.node_kv:
            return False
        node.kv = None
        self.evictions += 1
        if node.approx and not any(n.approx for n in node.path()[:-1]):
            node.approx = False  # its recompute will be exact...
            self.work.forget(node)  # ...so the working cache's copy must go too
            self.emit(Event.UPDATE, node)
        return True

    # -- memory --------------------------------------------------------------------------
    def kv_bytes(self) -> KVBytes:
        """Node KV and the working buffer, each storage counted once. Safe from any
        thread: it reads a snapshot of the node table (``list`` of a dict is atomic)."""
        nodes = list(self.tree.nodes.values()) if self.capabilities.node_kv else []
        return replace(resident_bytes(nodes, self.work), context=self.cache.context.nbytes())

    def touch(self, nodes: list[Node]) -> None:
        """Mark ``nodes`` as just used (least recently used KV is evicted first)."""
        self.lru.touch(nodes)

    def enforce_budget(self, protect: list[Node]) -> int:
        """Evict least recently used KV until node KV and the working buffer together
        fit ``kv_budget``; ``protect`` (the active path) is kept. Returns bytes resident."""
        if not self.capabilities.node_kv:
            return self.work.nbytes() + self.cache.context.nbytes()
        buffer = self.work.buf.untyped_storage()
        # The buffer and the injected memory's kept KV count but are not evicted.
        pinned = {buffer.data_ptr(): self.work.nbytes(), **self.cache.context.kept_storage()}
        return budget.enforce(
            list(self.tree.nodes.values()),
            self.kv_budget,
            self.lru,
            protect,
            self.evict,
            pinned=pinned,
        )
