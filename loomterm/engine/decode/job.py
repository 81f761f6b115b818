"""What a decoder is given: one generation's request and exactly the model it needs.

The local runner builds one :class:`DecodeJob` per generation and hands it to a
decoder (``plain``, ``banned``, ``drafted``). The job carries the forward pass over the
working cache, the sampler's starting state and penalty history, the node writer,
and the bookkeeping of the runner's path cache (:class:`PathKV`), so a decoder never
reads a runner's attributes. The ending every decoder shares (store the children's
KV, mark them used, leave the cache on the first child, keep to the budget, remember
the logits after it) is :meth:`DecodeJob.finish`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.sample.chain import SamplerState
from loomterm.engine.sample.history import PenaltyHistory
from loomterm.engine.text import StreamDecoder
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine.context import Assembled
    from loomterm.engine.kv.cache import WorkingCache
    from loomterm.engine.sample.penalties import DryBreakers
    from loomterm.engine.text import TokenText


class Forward(Protocol):
    """The model over the working cache (``LocalRunner.forward``): ``ids`` (B, q) after
    its columns, their KV written in place; (B, keep, V) logits of the last ``keep``."""

    def __call__(
        self,
        ids: torch.Tensor,
        keep: int = 1,
        positions: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


class PathKV(Protocol):
    """What a decoder asks of the runner's KV bookkeeping (``local.path_cache``)."""

    @property
    def assembled(self) -> Assembled | None:
        """The injected context of the latest ``ensure`` (None: the plain path)."""

    def ensure(self, node: Node) -> torch.Tensor:
        """Bring ``node``'s path into row 0; (V,) logits after it."""

    def remember(self, logits: torch.Tensor | None) -> None:
        """``logits`` (V,) follow row 0 as it is now (None: unknown)."""

    def store_generated(self, kids: list[Node], base: int, stored: list[int]) -> None:
        """Hand each child the KV of its first ``stored[i]`` tokens (columns ``base..``)."""

    def shift_window(self, parent: Node, kids: list[Node], fed: torch.Tensor) -> None:
        """Drop the window's oldest columns past ``n_ctx`` (``fed`` (B,) still pending)."""

    def seen(self, node: Node) -> list[int]:
        """What the model saw up to ``node``: the penalties' history."""

    def refill(self, kids: list[Node], live: list[bool]) -> torch.Tensor:
        """Re-assemble a full injected context for the children; (B, V) logits."""


@dataclass
class DecodeModel:
    """The model as every decoder uses it; the local runner keeps one.

    Attributes:
        work: The working cache (``kv.cache.WorkingCache``).
        kv: The runner's path cache: storing, remembering, shifting, refilling.
        forward: The model over the working cache.
        decode_step: ``forward`` for one token per row, (B,) -> (B, 1, V), faster.
        verify_block: ``forward`` for one row's block of drafted tokens, faster:
            (ids, offsets, mask (q, q) or None, keep) -> (keep, V); None where the
            model has no decode step (``kernels.step``).
        codec: The tokenizer's text of tokens, for streaming.
        eos_ids: Tokens that end a continuation.
        device: Where the model runs.
        n_ctx: The context window's size in tokens.
        rerotates: A window shift re-rotates kept keys (approximate) on this model.
        quantized: The weights are int8 or int4 (a drafted block costs more).
        touch: Mark nodes as just used (least recently used KV is evicted first).
        enforce_budget: Evict until resident KV fits the budget, keeping the given path.
    """

    work: WorkingCache
    kv: PathKV
    forward: Forward
    decode_step: Callable[[torch.Tensor], torch.Tensor]
    codec: TokenText
    eos_ids: frozenset[int]
    device: torch.device
    n_ctx: int
    rerotates: bool
    quantized: bool
    touch: Callable[[list[Node]], None]
    enforce_budget: Callable[[list[Node]], int]
    verify_block: Callable[..., torch.Tensor] | None = None


@dataclass
class DecodeJob:
    """One generation as a decoder sees it.

    Attributes:
        request: What is asked (the parent node, ``n``, sampling, callbacks).
        writer: The decoder's only way to change the tree.
        logits: (V,) after the parent's path, which the working cache's row 0 holds.
        model: The model and its cache (:class:`DecodeModel`).
        shift: Columns the window drops before the parent's end (0: none).
        dry_breakers: DRY's sequence breakers as token ids (None: DRY off).
    """

    request: GenerateRequest
    writer: NodeWriter
    logits: torch.Tensor
    model: DecodeModel
    shift: int
    dry_breakers: DryBreakers | None

    # -- the model's parts a decoder reaches most ----------------------------------------
    @property
    def work(self) -> WorkingCache:
        return self.model.work

    @property
    def kv(self) -> PathKV:
        return self.model.kv

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    @property
    def eos_ids(self) -> frozenset[int]:
        return self.model.eos_ids

    def forward(self, ids: torch.Tensor, **kwargs) -> torch.Tensor:
        """``DecodeModel.forward``: (B, q) ids -> (B, keep, V) logits."""
        return self.model.forward(ids, **kwargs)

    def decode_step(self, fed: torch.Tensor) -> torch.Tensor:
        """``DecodeModel.decode_step``: (B,) ids -> (B, 1, V) logits."""
        return self.model.decode_step(fed)

    @property
    def parent(self) -> Node:
        return self.request.node

    @property
    def keeps_kv(self) -> bool:
        """Whether children can keep their KV: their columns sit at their path positions
        (no window shift, no injected context before them)."""
        return self.shift == 0 and self.kv.assembled is None

    # -- what a decoder starts with -----------------------------------------------------
    def sampler(self, rows: int) -> SamplerState:
        """The sampler's state at the first token, for ``rows`` rows."""
        return SamplerState.start(
            self.request.sampling, rows, self.device, dry_breakers=self.dry_breakers
        )

    def history(self, rows: int) -> PenaltyHistory | None:
        """The penalties' history for ``rows`` rows (None when no sampler reads one),
        room left for every token the request may generate."""
        request = self.request
        if not request.sampling.uses_history:
            return None
        seen = self.kv.seen(request.node)
        return PenaltyHistory(seen, rows, request.max_new_tokens, self.device)

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self.model.codec)

    # -- what a decoder does with each token ---------------------------------------------
    def emit(self, kid: Node, token: int, logprob: float, top: list, stream: StreamDecoder) -> None:
        """Write ``token`` on ``kid`` and, when someone listens, stream its text."""
        self.writer.push(kid, token, logprob, top)
        if self.request.on_token is not None:
            self.request.on_token(kid, token, stream.push(token))

    # -- the ending ------------------------------------------------------------------------
    def store(self, kids: list[Node], base: int, stored: list[int]) -> None:
        """Hand ``kids`` their KV (the first ``stored[i]`` tokens' columns from ``base``)
        and mark their paths as just used."""
        self.kv.store_generated(kids, base, stored)
        self.model.touch([*self.parent.path(), *kids])

    def finish(
        self,
        kids: list[Node],
        base: int,
        stored: list[int],
        logits: torch.Tensor | None,
        cut: int | None = None,
    ) -> GenerateResult:
        """The common ending: store the children's KV, leave row 0 (the first child's
        path, cut to ``cut`` columns when given), keep to the budget, and remember
        ``logits`` (V,) after row 0 (None: unknown)."""
        self.store(kids, base, stored)
        self.work.select_row(0, self.work.segments)
        if cut is not None:
            self.work.truncate(cut)
        self.model.enforce_budget([*self.parent.path(), kids[0]])
        self.kv.remember(logits)
        return GenerateResult(children=list(kids))

    def nothing(self, base: int) -> GenerateResult:
        """The ending when no token came: the cache holds the parent again."""
        self.work.select_row(0, self.work.segments)
        self.work.truncate(base)
        return GenerateResult()
