"""Drafted (speculative) decoding of one continuation, verified against the model.

The local runner calls ``drafted_decode`` instead of the plain decoder
(``decode.plain.plain_decode``) when one continuation is asked for and ``drafting_config``
allows it. Each step feeds the token
just chosen together with a tree of drafted tokens after it (``decode.draft_tree``), in one
forward pass over the working cache, with a tree attention mask and explicit
positions. The verified logits then pick tokens one at a time, exactly as plain
decoding would; each drafted token that matches is accepted for free, its KV already
written. Accepted columns are moved down (``WorkingCache.keep_pending``) and committed;
the rest of the block is simply overwritten by the next step.

Lossless by construction: every emitted token is chosen from the model's own logits
for the true prefix (``sample.chain.sample``: the argmax under greedy, one draw from
``sampling_probs`` otherwise), so greedy output is plain decoding's and a seed gives
the same text with drafting on or off (up to float rounding in the logits).

Reference: gpt-fast ``generate.py`` (``speculative_decode``); SpecInfer's tree
attention; lookahead decoding (see ``decode.draft_tree``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from loomterm.engine.decode.draft_ledger import Ledger
from loomterm.engine.decode.draft_sources import draft_sources
from loomterm.engine.decode.draft_table import TABLE, table_sampler
from loomterm.engine.decode.draft_tree import (
    POOL,
    Acceptance,
    Cost,
    DraftConfig,
    DraftTree,
    Lookahead,
    accept_walk,
    build_block,
    walk_trials,
)
from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.sample.chain import SamplerState, make_generators, sample_step, token_records
from loomterm.engine.text import StreamDecoder

if TYPE_CHECKING:
    from loomterm.engine.local.runner import LocalRunner

# The ``drafting`` setting: "auto" drafts from the tree while drafting pays and decodes
# plainly (with rare probes) while it does not (``draft_ledger``) -- lookahead's Jacobi window
# costs more than it wins on a CPU (see ``loomterm bench``) and is not measured on a GPU
# yet; "tree" drafts from the tree whatever it earns; "lookahead" adds the Jacobi
# window; "off" never drafts.
MODES = ("auto", "tree", "lookahead", "off")
# Steps between recalibrations of the acceptance model's cost (``Ledger.calibrated``).
RECALIBRATE_EVERY = 4


@dataclass
class DraftStats:
    """What one drafted generation did."""

    steps: int = 0  # forward passes
    emitted: int = 0  # tokens generated
    drafted: int = 0  # draft tokens sent to the model
    accepted: int = 0  # of them, accepted
    lookahead: bool = False
    per_step: list[int] = field(default_factory=list)  # tokens emitted per forward
    by_source: dict[int, int] = field(default_factory=dict)  # accepted drafts per source

    @property
    def tokens_per_step(self) -> float:
        return self.emitted / self.steps if self.steps else 0.0

    @property
    def accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


def drafting_config(runner: LocalRunner, request: GenerateRequest) -> DraftConfig | None:
    """The draft settings for this generation, or None to decode plainly.

    Drafting covers one continuation (``n == 1``) that fits in the context window
    without a shift: the block of drafts must fit too. Under memory, an author's note
    or world info it drafts the same way: the drafts come from the document and the
    tree, the block runs after the assembled context's columns (``cache.assembled``),
    and nothing is stored on the child (its columns are not at its path positions).
    A generation that would fill the window decodes plainly, which refills it
    (``ContextKV.refill``).
    """
    mode = request.drafting
    if mode not in MODES:
        raise ValueError(f"drafting must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off" or request.n != 1 or request.max_new_tokens < 1:
        return None
    lookahead = mode == "lookahead"
    quantized = getattr(runner.loaded, "quant", "none") != "none"
    config = DraftConfig(
        lookahead=lookahead,
        cost=Cost.for_device(runner.device.type, quantized=quantized),
        adaptive=mode == "auto",
    )
    block = config.tree_budget + 1
    if lookahead:
        block += config.guesses * (config.ngram - 1) + config.window * (config.ngram - 1)
    parent, assembled = request.node, runner.cache.assembled
    held = parent.end if assembled is None else len(assembled.tokens)  # the columns
    fits = held + request.max_new_tokens + block <= runner.n_ctx
    if not fits or runner.work.length != held:
        return None
    return config


@torch.inference_mode()
def drafted_decode(
    runner: LocalRunner,
    request: GenerateRequest,
    writer: NodeWriter,
    logits: torch.Tensor,
    config: DraftConfig,
) -> GenerateResult:
    """Generate up to ``request.max_new_tokens`` into one new child of the request's
    node, made when its first token arrives (a generation cancelled at once makes none).

    ``logits``: (V,) after the parent's path, which the working cache's row 0 holds.
    On return the child holds its tokens with their records and KV, the working cache
    holds its path and remembers the logits after it.
    """
    parent, params, seed = request.node, request.sampling, request.seed
    max_new_tokens, on_token, cancel = request.max_new_tokens, request.on_token, request.cancel
    logits = logits[None]  # (1, V)
    if request.n != 1:
        raise ValueError("drafted decoding makes one continuation")
    work = runner.work
    base = work.length
    device = runner.device
    generators = make_generators(seed, 1)
    stream = StreamDecoder(runner.codec)
    eos = runner.eos_ids
    stats = DraftStats(lookahead=config.lookahead)
    result = GenerateResult(drafting=stats)

    document = parent.path_tokens()  # grows with kid's tokens
    penalize = params.uses_history
    # The penalties read what the model saw: the assembled context under injection
    # (``ContextKV.history``), ``lead`` tokens longer than the document. It is a
    # (1, T + new) buffer written in place as tokens are chosen and read through a view
    # of its first ``lead + len(document)`` columns, so a step does not copy the path
    # (as in ``decode.plain.plain_decode``).
    history_buf = None
    seen = runner.cache.context.history(parent) if penalize else document
    lead = len(seen) - len(document)
    if penalize:
        history_buf = torch.empty((1, len(seen) + max_new_tokens), dtype=torch.long, device=device)
        history_buf[0, : len(seen)] = torch.tensor(seen, dtype=torch.long)
    # One state, threaded through every emitted token in order: mirostat's mu and the
    # XTC coins then follow plain decoding's draws exactly (sampling.SamplerState).
    state = SamplerState.start(params, 1, device, dry_breakers=runner.dry_breakers(params))
    # The tree index and the model's recorded expectations (``decode.draft_table``, tempered as
    # this request samples), kept from the last generation from this parent if still good.
    sampler = table_sampler(params)
    tree_nodes = runner.tree.nodes if getattr(runner, "tree", None) is not None else {}
    sources = draft_sources(runner, tree_nodes, parent, config, sampler)
    index, table = sources.index, sources.table
    look = None
    if config.lookahead:
        look = Lookahead(config.window, config.ngram, config.guesses, document[-256:])
    capacity = 1 + config.tree_budget
    if look is not None:
        capacity += config.guesses * (config.ngram - 1)

    def choose(row: torch.Tensor) -> int:
        """The model's token from one row of verified logits: (V,) -> id."""
        nonlocal state
        history = history_buf[:, : lead + len(document)] if history_buf is not None else None
        token, state = sample_step(row[None], params, generators, history, state)
        return int(token[0])

    def extend(token: int) -> None:
        document.append(token)
        if history_buf is not None:
            history_buf[0, lead + len(document) - 1] = token

    def emit(rows: torch.Tensor, tokens: list[int]) -> int:
        """Record and stream ``tokens`` (chosen from ``rows`` (k, V)); stop early when
        cancelled. Returns how many were emitted."""
        chosen = torch.tensor(tokens, device=rows.device)
        logprobs, alternatives = token_records(rows, chosen)
        at = len(document) - len(tokens)  # where ``tokens`` start in the document
        for i, token in enumerate(tokens):
            writer.push(kid, token, logprobs[i], alternatives[i])
            index.add(kid, len(kid.tokens) - 1)
            if table is not None:
                table.add_position(document[max(0, at + i - 2) : at + i], token, alternatives[i])
            if on_token is not None:
                on_token(kid, token, stream.push(token))
            if cancel is not None and cancel.is_set():
                return i + 1
        return len(tokens)

    def finished() -> bool:
        return len(kid.tokens) >= max_new_tokens or (kid.tokens and kid.tokens[-1] in eos)

    # The first token comes from the parent's logits; from then on one token is always
    # chosen but not yet fed (``pending``), and each step feeds it with its drafts.
    if cancel is not None and cancel.is_set():
        return result  # nothing generated: the cache still holds the parent
    first = choose(logits[0])
    extend(first)
    kid = writer.new_child(parent, params.as_dict(), seed)
    result.children.append(kid)
    emit(logits[:1], [first])
    fed = 0  # kid tokens whose KV is committed
    last_row = logits[0]
    # What drafting earned in earlier generations of this regime carries over, so a
    # run of sampled regenerations pays to learn that drafts are rarely accepted once.
    regime = "greedy" if params.greedy else "sampled"
    if config.adaptive:
        ledger = runner.draft_ledgers.setdefault(
            (regime, config.lookahead), Ledger(probe_every=config.probe_every)
        )
        ledger.begin()
    else:  # "tree" and "lookahead" draft whatever the acceptance model says pays
        ledger = Ledger(always=True, probe_every=config.probe_every)
    # The depth each source gets follows the passes' measured cost (``draft_ledger``).
    acceptance = Acceptance(ledger.calibrated(config.cost), config.max_depth)
    while True:
        clock = time.perf_counter()  # the step's whole cost: drafts, forward, choices
        pending = kid.tokens[-1]
        stop_now = finished() or (cancel is not None and cancel.is_set())
        tree = DraftTree(pending, 1 if stop_now else capacity)
        timing_plain = ledger.wants_plain  # this step is plain, to time one
        paying = ledger.pays and not timing_plain
        probe = False
        if not stop_now:
            room = max_new_tokens - len(kid.tokens)
            # A probe drafts from each source, whether or not it pays: a source (or
            # drafting) judged not to pay is noticed when it starts to.
            probe = ledger.probe_due() and not timing_plain  # 8, 16, 32, 64 steps apart

            def depth_for(
                source: int, room: int = room, probe: bool = probe, paying: bool = paying
            ) -> int:
                # A probe is a pass as drafting would make it (at least one token per
                # source), so what it costs and yields says whether drafting pays.
                planned = acceptance.depth(source) if paying or probe else 0
                return min(planned or int(probe), room)

            tail = document[-config.max_ngram :]
            if table is not None and not params.greedy:
                # A sampled draw rarely follows a draft for long: a small block, where a
                # forward costs least over a plain step (``Cost``), the table first.
                offered = (TABLE, *range(config.min_ngram, config.max_ngram + 1))
                cap = min(config.table_budget, max(depth_for(k) for k in offered))
                table.propose(tree, tail, min(depth_for(TABLE), cap))
                index.propose(tree, tail, config.min_ngram, depth_for, limit=1 + cap)
            else:
                limit = 1 + config.tree_budget
                index.propose(tree, tail, config.min_ngram, depth_for, limit=limit)
                if table is not None:
                    budget = min(depth_for(TABLE), config.table_budget, limit - len(tree))
                    table.propose(tree, tail, budget)
            if look is not None and depth_for(POOL):
                for gram in look.candidates(pending):
                    tree.add_sequence(gram, depth_for(POOL), POOL)
        block = build_block(tree, None if stop_now else look)
        out = _verify_forward(runner, block)  # (keep, V)
        stats.steps += 1
        stats.drafted += len(tree) - 1
        tree_rows = out[: block.tree_size]  # (n, V): logits after each tree node
        if stop_now:
            work.commit(1, kid, fed)
            fed += 1
            last_row = tree_rows[0]
            stats.per_step.append(0)
            break

        def stop(token: int, count: int) -> bool:
            return token in eos or len(kid.tokens) + count >= max_new_tokens

        def choose_at(i: int, rows: torch.Tensor = tree_rows) -> int:
            token = choose(rows[i])
            extend(token)  # the penalty and the lookups read it
            return token

        walk = accept_walk(tree, choose_at, stop)
        trials = walk_trials(tree, walk)
        acceptance.update(trials)
        for source, ok in trials:
            if ok:
                stats.by_source[source] = stats.by_source.get(source, 0) + 1
        emitted = emit(tree_rows[[row for row, _, _ in walk]], [t for _, t, _ in walk])
        del document[len(document) - (len(walk) - emitted) :]  # chosen but cancelled
        walk = walk[:emitted]
        accepted = [node for _, _, node in walk if node is not None]
        offsets = [block.tree_start] + [block.tree_start + node for node in accepted]
        work.keep_pending(offsets)
        work.commit(len(offsets), kid, fed)
        fed += len(offsets)
        stats.accepted += len(accepted)
        stats.emitted = len(kid.tokens)
        stats.per_step.append(len(walk))
        if look is not None:
            outputs = out[block.tree_size :].argmax(-1).tolist()
            look.update(pending, outputs, len(accepted))
        else:  # lookahead's window always runs (opt-in): its passes are not judged
            ledger.record(len(block.ids) - 1, len(walk), time.perf_counter() - clock)
            if probe:
                ledger.probed()
            if stats.steps % RECALIBRATE_EVERY == 0:
                acceptance.use_cost(ledger.calibrated(config.cost))
        if walk[-1][2] is not None:  # the last emitted token was a draft: already fed
            last_row = tree_rows[walk[-1][2]]
            break
    stats.emitted = len(kid.tokens)
    assert fed == len(kid.tokens), "every emitted token is fed"
    sources.note(kid)  # indexed as it grew
    # Under an injected context the columns are not at the child's path positions.
    stored = fed if runner.cache.assembled is None else 0
    runner.cache.store_generated([kid], base, [stored])
    runner.touch([*parent.path(), kid])
    work.select_row(0, work.segments)
    runner.enforce_budget([*parent.path(), kid])
    runner.cache.remember(last_row)  # (V,)
    return result


def _verify_forward(runner: LocalRunner, block) -> torch.Tensor:
    """Run one block after the working cache's columns: (keep, V) logits. A block of
    the pending token alone (nothing drafted) is a plain decode step, and runs as one
    (``LocalRunner.decode_step``), so a step without drafts costs what plain decoding's
    does."""
    device = runner.device
    length = runner.work.length
    if len(block.ids) == 1 and block.mask is None and block.keep == 1:
        token = torch.tensor(block.ids, device=device)  # (1,)
        return runner.decode_step(token)[0]  # (1, V)
    ids = torch.tensor([block.ids], device=device)  # (1, q)
    if block.mask is None:  # a chain: the default causal layout is right
        return runner.forward(ids, keep=block.keep)[0]
    q = len(block.ids)
    positions = torch.tensor([block.offsets], device=device) + length  # (1, q)
    mask = torch.ones(1, 1, q, length + q, dtype=torch.bool, device=device)
    mask[0, 0, :, length:] = block.mask.to(device)  # (q, q) among the block
    return runner.forward(ids, keep=block.keep, positions=positions, attention_mask=mask)[0]
