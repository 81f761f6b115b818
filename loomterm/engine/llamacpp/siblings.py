"""The llama.cpp runner's decoder: ``n`` siblings, one sequence each, over one shared prefix.

Every sibling's sequence shares the parent's cells (``seq_cp``), so the prompt is
evaluated once. Each step samples one token per live sibling with loomterm's own
sampler chain (``sampling.sample_step``: every sampler, seeded as on the torch runner),
writes it into the tree, and feeds the live siblings' tokens to llama.cpp, which
returns their next logits: as one ``llama_decode`` (one token per sequence), or as one
decode per sibling where that has cost less per token in this runner (``batching``).
A sibling that ends (end of sequence) drops out. Afterwards each sibling's sequence
holds its path, so going to any of them computes nothing.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch

from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.llamacpp.batching import BatchCosts
from loomterm.engine.llamacpp.context import LlamaContext
from loomterm.engine.llamacpp.slots import Slot, Want
from loomterm.engine.llamacpp.text import LlamaTokenText
from loomterm.engine.sample.chain import (
    SamplerState,
    SamplingParams,
    make_generators,
    sample_step,
    token_record_tensor,
    unpack_token_records,
)
from loomterm.engine.sample.healing import HealState
from loomterm.engine.sample.penalties import DryBreakers
from loomterm.engine.text import StreamDecoder
from loomterm.tree import Node


class SiblingHost(Protocol):
    """What the sibling decoder uses of the llama.cpp runner (it never imports it)."""

    llama: LlamaContext
    codec: LlamaTokenText
    slots: list[Slot]
    batching: BatchCosts
    eos_ids: frozenset[int]
    clock: int  # a step counter: a slot's ``used`` orders eviction

    def bring(self, want: Want, node: Node) -> tuple[Slot, torch.Tensor]: ...

    def row_slots(self, parent: Slot, n: int) -> list[Slot]: ...

    def dry_breakers(self, params: SamplingParams) -> DryBreakers | None: ...


def decode_siblings(
    runner: SiblingHost,
    request: GenerateRequest,
    writer: NodeWriter,
    want: Want,
    parent_slot: Slot,
    logits: torch.Tensor,
    max_new: int,
) -> GenerateResult:
    """Decode ``request`` from ``parent_slot`` (holding ``want``), whose next-token
    logits are ``logits`` (V,). Siblings beyond the context's sequences run in groups."""
    width = len(runner.slots)
    kids: list = []
    for first in range(0, request.n, width):
        count = min(width, request.n - first)
        kids += _group(runner, request, writer, want, parent_slot, logits, max_new, first, count)
        if request.cancelled:
            break
    return GenerateResult(children=kids)


def _group(runner, request, writer, want, parent_slot, logits, max_new, first, n) -> list:
    """One batch of ``n`` siblings (rows ``first..first+n-1`` of the request's seeds)."""
    params = request.sampling
    if first:  # a later group: the parent's path again (its sequence may have moved on)
        parent_slot, logits = runner.bring(want, request.node)
    base = len(want.tokens)
    slots = runner.row_slots(parent_slot, n)
    approx = parent_slot.approx_before(base)
    seed = None if request.seed is None else request.seed
    generators = make_generators(seed, first + n)
    generators = generators[first:] if generators is not None else None
    streams = [StreamDecoder(runner.codec) for _ in range(n)]
    state = SamplerState.start(params, n, dry_breakers=runner.dry_breakers(params))
    history = [list(want.tokens) for _ in range(n)] if params.uses_history else None
    rows = logits[None].expand(n, -1).clone()  # (n, V)
    kids: list = []
    finished = [False] * n
    heal = HealState.start(request.heal, n)  # typed text the first tokens spell again
    for step in range(max_new):
        if request.cancelled and not heal.pending:  # healing ends first: the text is whole
            break
        allowed = heal.constrain(rows, max_new - step)  # (n, V)
        chosen, state = sample_step(allowed, params, generators, history, state)  # (n,)
        picks, logprobs, alternatives = unpack_token_records(
            token_record_tensor(allowed, chosen).tolist()
        )
        alternatives, heal = heal.alternatives(alternatives), heal.after(picks)
        if not kids:
            sampling = request.sampling_record()
            kids = [writer.new_child(request.node, sampling, request.seed) for _ in range(n)]
            if approx:
                for kid in kids:
                    writer.mark_approx(kid)
        feed = []
        for row, kid in enumerate(kids):
            if finished[row]:
                continue
            token = picks[row]
            writer.push(kid, token, logprobs[row], alternatives[row])
            if request.on_token is not None:
                request.on_token(kid, token, streams[row].push(token))
            if history is not None:
                history[row].append(token)
            if token in runner.eos_ids:
                finished[row] = True
            else:
                feed.append(row)
        if feed:
            growing = [(slots[row], picks[row], kids[row].id if approx else None) for row in feed]
            out = _advance(runner, growing, base + step)  # (len(feed), V)
            if len(feed) == n:
                rows = out  # a fresh tensor each step: every row's logits, in order
            else:
                rows[feed] = out  # the rows still growing; stopped ones keep theirs
        if all(finished):
            break
    for slot in slots:
        slot.used = runner.clock
    return kids


def _advance(
    runner: SiblingHost, growing: list[tuple[Slot, int, int | None]], at: int
) -> torch.Tensor:
    """Feed each ``(slot, pick, owner)`` of ``growing`` its pick at position ``at`` (its
    cell owned by ``owner``; None: exact): the (len(growing), V) next logits, each slot
    keeping its own row."""
    out = _feed(runner, [(pick, at, slot.seq) for slot, pick, _ in growing])
    for i, (slot, pick, owner) in enumerate(growing):
        slot.extend([pick], [owner])
        slot.logits = out[i]  # a fresh tensor each step: no copy needed
    return out


def _feed(runner: SiblingHost, batch: list[tuple[int, int, int]]) -> torch.Tensor:
    """The (rows, V) next logits of ``batch``'s (token, position, sequence) rows: one
    ``llama_decode`` of them all, or one each, whichever ``runner.batching`` picks; the
    step's time is recorded for the next pick."""
    if len(batch) == 1:
        return runner.llama.decode_rows(batch)
    together = runner.batching.batched(len(batch))
    start = time.perf_counter()
    if together:
        out = runner.llama.decode_rows(batch)
    else:
        out = torch.cat([runner.llama.decode_rows([row]) for row in batch])
    runner.batching.record(together, len(batch), time.perf_counter() - start)
    return out
