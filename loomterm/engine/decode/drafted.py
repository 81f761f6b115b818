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

Sampled drafts follow the draws themselves: a draw is an exponential race,
``argmax(p / E)`` with ``E`` drawn from the row's generator whatever ``p`` is
(``sample.ahead``), so the races of the next few tokens are drawn ahead and the
alternatives table drafts, at each depth, the token the race would pick were the
model's distribution the table's estimate ``q`` (``draft_table.propose_raced``). The
token really drawn then equals the draft about as often as ``q`` is close to ``p``,
instead of ``p(draft)``: on the bench's sampled regenerations the first draft is the
token drawn 31-37% of the time against 19-30% for the table's likeliest token. The
acceptance rule does not change (a draft is kept when it is the token drawn), so the
text is still plain decoding's for the seed.

Verification blocks run through the decode step's own kernels where the model has
one (``kernels.step.DecodeStep.block``), not the generic forward.

Reference: gpt-fast ``generate.py`` (``speculative_decode``); SpecInfer's tree
attention; lookahead decoding (see ``decode.draft_tree``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from loomterm.engine.decode.draft_block import Block, Lookahead, build_block
from loomterm.engine.decode.draft_ledger import Ledger
from loomterm.engine.decode.draft_sources import DraftSources, draft_sources
from loomterm.engine.decode.draft_table import TABLE, propose_raced, table_sampler
from loomterm.engine.decode.draft_tree import (
    POOL,
    Acceptance,
    Cost,
    DraftConfig,
    DraftTree,
    accept_walk,
    walk_trials,
)
from loomterm.engine.decode.job import DecodeJob, DecodeModel
from loomterm.engine.generation import DraftStats, GenerateRequest, GenerateResult
from loomterm.engine.kernels.cpu_linear import onednn_available
from loomterm.engine.sample.chain import DrawAhead, make_generators, sample_step, token_records
from loomterm.engine.sample.healing import HealState
from loomterm.engine.sample.history import history_view
from loomterm.tree import Node

# The ``drafting`` setting: "auto" drafts from the tree while drafting pays and decodes
# plainly (with rare probes) while it does not (``draft_ledger``) -- lookahead's Jacobi window
# costs more than it wins on a CPU (see ``loomterm bench``) and is not measured on a GPU
# yet; "tree" drafts from the tree whatever it earns; "lookahead" adds the Jacobi
# window; "off" never drafts.
MODES = ("auto", "tree", "lookahead", "off")
# Steps between recalibrations of the acceptance model's cost (``Ledger.calibrated``).
RECALIBRATE_EVERY = 4


@dataclass
class KeptDrafting:
    """What drafted decoding keeps between generations, on the runner: the draft
    sources of the last parent drafted from, and whether drafting pays, per regime
    (greedy or sampled, lookahead or not)."""

    sources: DraftSources | None = None
    ledgers: dict[tuple[str, bool], Ledger] = field(default_factory=dict)


def drafting_config(request: GenerateRequest, model: DecodeModel) -> DraftConfig | None:
    """The draft settings for this generation, or None to decode plainly.

    Drafting covers one continuation (``n == 1``) that fits in the context window
    without a shift: the block of drafts must fit too. Under memory, an author's note
    or world info it drafts the same way: the drafts come from the document and the
    tree, the block runs after the assembled context's columns (``kv.assembled``),
    and nothing is stored on the child (its columns are not at its path positions).
    A generation that would fill the window decodes plainly, which refills it
    (``ContextKV.refill``). Read with the cache as it is now (the request's node
    prepared).
    """
    mode = request.drafting
    if mode not in MODES:
        raise ValueError(f"drafting must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off" or request.n != 1 or request.max_new_tokens < 1:
        return None
    lookahead = mode == "lookahead"
    config = DraftConfig(
        lookahead=lookahead,
        cost=Cost.for_device(
            model.device.type, quantized=model.quantized, onednn=onednn_available()
        ),
        adaptive=mode == "auto",
    )
    block = config.tree_budget + 1
    if lookahead:
        block += config.guesses * (config.ngram - 1) + config.window * (config.ngram - 1)
    parent, assembled = request.node, model.kv.assembled
    held = parent.end if assembled is None else len(assembled.tokens)  # the columns
    fits = held + request.max_new_tokens + block <= model.n_ctx
    if not fits or model.work.length != held:
        return None
    return config


@torch.inference_mode()
def drafted_decode(
    job: DecodeJob, config: DraftConfig, kept: KeptDrafting, tree_nodes: dict[int, Node]
) -> GenerateResult:
    """Generate up to ``request.max_new_tokens`` into one new child of the request's
    node, made when its first token arrives (a generation cancelled at once makes none).

    ``job.logits``: (V,) after the parent's path, which the working cache's row 0
    holds. On return the child holds its tokens with their records and KV, the working
    cache holds its path and remembers the logits after it. ``kept``: what earlier
    generations left (updated here); ``tree_nodes``: the tree's nodes by id.
    """
    if job.request.n != 1:
        raise ValueError("drafted decoding makes one continuation")
    return DraftedDecoder(job, config, kept, tree_nodes).run()


class DraftedDecoder:
    """One drafted generation, step by step: propose drafts after the pending token,
    verify them in one forward pass, accept what the model's own choices follow.

    State: ``document`` (the parent's tokens and every token chosen), ``history`` (the
    penalties' view of what the model saw), ``state`` (the sampler's, threaded through
    every emitted token in order: mirostat's mu and the XTC coins then follow plain
    decoding's draws exactly), ``fed`` (the child's tokens whose KV is committed).
    """

    def __init__(
        self, job: DecodeJob, config: DraftConfig, kept: KeptDrafting, tree_nodes: dict
    ) -> None:
        request = job.request
        self.job, self.config, self.kept = job, config, kept
        self.params = request.sampling
        self.base = job.work.length
        self.generators = make_generators(request.seed, 1)
        # Sampled: the coming draws, drawn ahead so that drafts can follow them
        # (``sample.ahead``); the tokens drawn are the generator's as ever.
        self.ahead = None
        if not self.params.greedy:
            generator = self.generators[0] if self.generators is not None else None
            vocab = job.logits.shape[-1]
            self.ahead = [DrawAhead(generator, vocab, self.params.xtc_active)]
        self.stream = job.stream()
        self.stats = DraftStats(lookahead=config.lookahead)
        self.document = request.node.path_tokens()  # grows with the child's tokens
        self.prompt_tokens = len(self.document)
        # (1, T + new), under injection the assembled context (``ContextKV.history``),
        # written in place as tokens are chosen, cut back with the document.
        self.history = job.history(1)
        self.state = job.sampler(1)
        # Token healing: the typed text the first tokens spell again, and the masked
        # rows the tokens chosen since the last ``emit`` were drawn from (None: unmasked).
        self.heal = HealState.start(request.heal, 1)
        self.masked: list[torch.Tensor | None] = []
        # The tree index and the model's recorded expectations (``decode.draft_table``,
        # tempered as this request samples), kept from the last generation from this
        # parent if still good.
        sampler = table_sampler(self.params)
        sources = draft_sources(kept.sources, tree_nodes, request.node, config, sampler)
        kept.sources = sources
        self.sources, self.index, self.table = sources, sources.index, sources.table
        self.look = None
        if config.lookahead:
            self.look = Lookahead(config.window, config.ngram, config.guesses, self.document[-256:])
        self.capacity = 1 + config.tree_budget
        if self.look is not None:
            self.capacity += config.guesses * (config.ngram - 1)
        self.acceptance = Acceptance(config.cost, config.max_depth)
        self.ledger = Ledger()  # set by ``run`` after the first token (``start_ledger``)
        self.probe = False  # whether this step probes (``draft_ledger``)
        self.kid: Node | None = None
        self.fed = 0

    def start_ledger(self) -> None:
        """What drafting earned in earlier generations of this regime carries over, so
        a run of sampled regenerations pays to learn that drafts are rarely accepted
        once; "tree" and "lookahead" draft whatever the acceptance model says pays."""
        if self.config.adaptive:
            regime = "greedy" if self.params.greedy else "sampled"
            key = (regime, self.config.lookahead)
            ledger = Ledger(probe_every=self.config.probe_every)
            self.ledger = self.kept.ledgers.setdefault(key, ledger)
            self.ledger.begin()
        else:
            self.ledger = Ledger(always=True, probe_every=self.config.probe_every)
        # The depth each source gets follows the passes' measured cost.
        self.acceptance.use_cost(self.ledger.calibrated(self.config.cost))

    # -- choosing and emitting ------------------------------------------------------------
    def choose(self, row: torch.Tensor) -> int:
        """The model's token from one row of verified logits: (V,) -> id."""
        history = history_view(self.history)
        made = len(self.document) - self.prompt_tokens  # tokens chosen before this one
        allowed = self.heal.constrain(row[None], self.job.request.max_new_tokens - made)  # (1, V)
        token, self.state = sample_step(
            allowed, self.params, self.generators, history, self.state, self.ahead
        )
        self.masked.append(allowed[0] if self.heal.pending else None)
        self.heal = self.heal.after([int(token[0])])
        return int(token[0])

    def extend(self, token: int) -> None:
        """A chosen token joins the document (the penalties and the lookups read it)."""
        self.document.append(token)
        if self.history is not None:
            self.history.push(token)

    def emit(self, rows: torch.Tensor, tokens: list[int]) -> int:
        """Record and stream ``tokens`` (chosen from ``rows`` (k, V)); stop early when
        cancelled. Returns how many were emitted."""
        kid, job = self.kid, self.job
        masked, self.masked = self.masked, []
        # A cancel waits for the healed tokens: the typed text comes out whole.
        last_healed = max((i for i, row in enumerate(masked) if row is not None), default=-1)
        if any(row is not None for row in masked):  # healed tokens: recorded as drawn
            rows = torch.stack([m if m is not None else r for m, r in zip(masked, rows)])
        chosen = torch.tensor(tokens, device=rows.device)
        logprobs, alternatives = token_records(rows, chosen)
        alternatives = self.heal.alternatives(alternatives)
        at = len(self.document) - len(tokens)  # where ``tokens`` start in the document
        for i, token in enumerate(tokens):
            job.writer.push(kid, token, logprobs[i], alternatives[i])
            self.index.add(kid, len(kid.tokens) - 1)
            if self.table is not None:
                self.table.add_position(
                    self.document[max(0, at + i - 2) : at + i], token, alternatives[i]
                )
            if job.request.on_token is not None:
                job.request.on_token(kid, token, self.stream.push(token))
            if job.request.cancelled and not self.heal.pending and i >= last_healed:
                return i + 1
        return len(tokens)

    def finished(self) -> bool:
        kid = self.kid
        full = len(kid.tokens) >= self.job.request.max_new_tokens
        return full or bool(kid.tokens and kid.tokens[-1] in self.job.eos_ids)

    # -- one step ---------------------------------------------------------------------------
    def propose(self, pending: int) -> DraftTree:
        """The tree of drafts after ``pending``, as deep as each source has earned."""
        config, table, index, ledger = self.config, self.table, self.index, self.ledger
        tree = DraftTree(pending, self.capacity)
        room = self.job.request.max_new_tokens - len(self.kid.tokens)
        timing_plain = ledger.wants_plain  # this step is plain, to time one
        paying = ledger.pays and not timing_plain
        # A probe drafts from each source, whether or not it pays: a source (or
        # drafting) judged not to pay is noticed when it starts to.
        probe = self.probe = ledger.probe_due() and not timing_plain  # 8 to 64 steps apart

        def depth_for(source: int) -> int:
            # While drafting pays, a probe is a pass as drafting would make it (at least
            # one token per source). While it does not, a probe asks each source for one
            # token: a pass of a few rows costs little more than a plain step, and a
            # source that starts to hit earns its depth from there (a deep probe that
            # misses cost about two plain steps for one token).
            planned = self.acceptance.depth(source) if paying else 0
            return min(planned or int(probe), room)

        tail = self.document[-config.max_ngram :]
        if table is not None and not self.params.greedy:
            # A sampled draw rarely follows a draft for long: a small block, where a
            # forward costs least over a plain step (``Cost``), the table first.
            offered = (TABLE, *range(config.min_ngram, config.max_ngram + 1))
            cap = min(config.table_budget, max(depth_for(k) for k in offered))
            if self.ahead is not None:
                # The table's chain follows the coming draws: deeper, as it holds longer.
                propose_raced(table, tree, tail, min(depth_for(TABLE), config.race_depth),
                              self.race_at)  # fmt: skip
            else:
                table.propose(tree, tail, min(depth_for(TABLE), cap))
            index.propose(tree, tail, config.min_ngram, depth_for, limit=len(tree) + cap)
        else:
            limit = 1 + config.tree_budget
            index.propose(tree, tail, config.min_ngram, depth_for, limit=limit)
            if table is not None:
                budget = min(depth_for(TABLE), config.table_budget, limit - len(tree))
                table.propose(tree, tail, budget)
        if self.look is not None and depth_for(POOL):
            for gram in self.look.candidates(pending):
                tree.add_sequence(gram, depth_for(POOL), POOL)
        return tree

    def race_at(self, depth: int, tokens: list[int]) -> list[float]:
        """The ``depth``-th coming draw's exponentials at ``tokens`` (0: the next)."""
        race = self.ahead[0].race(depth)
        return race[torch.tensor(tokens)].tolist()

    def verify(self, block: Block) -> torch.Tensor:
        """Run one block after the working cache's columns: (keep, V) logits. A block
        of the pending token alone (nothing drafted) is a plain decode step, and runs as
        one (``LocalRunner.decode_step``), so a step without drafts costs what plain
        decoding's does."""
        job = self.job
        device, length = job.device, job.work.length
        if len(block.ids) == 1 and block.mask is None and block.keep == 1:
            token = torch.tensor(block.ids, device=device)  # (1,)
            return job.decode_step(token)[0]  # (1, V)
        if job.model.verify_block is not None:  # the decode step's kernels, one row
            return job.model.verify_block(block.ids, block.offsets, block.mask, block.keep)
        ids = torch.tensor([block.ids], device=device)  # (1, q)
        if block.mask is None:  # a chain: the default causal layout is right
            return job.forward(ids, keep=block.keep)[0]
        q = len(block.ids)
        positions = torch.tensor([block.offsets], device=device) + length  # (1, q)
        mask = torch.ones(1, 1, q, length + q, dtype=torch.bool, device=device)
        mask[0, 0, :, length:] = block.mask.to(device)  # (q, q) among the block
        return job.forward(ids, keep=block.keep, positions=positions, attention_mask=mask)[0]

    def learn(self, tree: DraftTree, walk: list, block: Block) -> None:
        """What this step says about each source and about whether drafting pays."""
        trials = walk_trials(tree, walk)
        self.acceptance.update(trials)
        for source, ok in trials:
            if ok:
                self.stats.by_source[source] = self.stats.by_source.get(source, 0) + 1

    def judge(self, block: Block, emitted: int, seconds: float) -> None:
        """The step's measured cost and yield, for the ledger (``draft_ledger``);
        lookahead's window always runs (opt-in): its passes are not judged."""
        if self.look is not None:
            return
        self.ledger.record(len(block.ids) - 1, emitted, seconds)
        if self.probe:
            self.ledger.probed()
        if self.stats.steps % RECALIBRATE_EVERY == 0:
            self.acceptance.use_cost(self.ledger.calibrated(self.config.cost))

    def accept(self, walk: list, block: Block, tree_rows: torch.Tensor) -> list:
        """Emit the walk's tokens, keep the accepted drafts' columns and commit them;
        returns the walk as far as it was emitted (a cancel can cut it)."""
        work, kid = self.job.work, self.kid
        emitted = self.emit(tree_rows[[row for row, _, _ in walk]], [t for _, t, _ in walk])
        del self.document[len(self.document) - (len(walk) - emitted) :]  # chosen, cancelled
        if self.history is not None:
            self.history.cut(len(self.document) - self.prompt_tokens)
        walk = walk[:emitted]
        accepted = [node for _, _, node in walk if node is not None]
        offsets = [block.tree_start] + [block.tree_start + node for node in accepted]
        work.keep_pending(offsets)
        work.commit(len(offsets), kid, self.fed)
        self.fed += len(offsets)
        self.stats.accepted += len(accepted)
        self.stats.emitted = len(kid.tokens)
        self.stats.per_step.append(len(walk))
        return walk

    def step(self) -> torch.Tensor | None:
        """One forward pass: the pending token and its drafts. Returns the (V,) logits
        after the child when the generation is over, else None."""
        job, kid, stats = self.job, self.kid, self.stats
        clock = time.perf_counter()  # the step's whole cost: drafts, forward, choices
        pending = kid.tokens[-1]
        stop_now = self.finished() or (job.request.cancelled and not self.heal.pending)
        tree = DraftTree(pending, 1) if stop_now else self.propose(pending)
        block = build_block(tree, None if stop_now else self.look)
        out = self.verify(block)  # (keep, V)
        stats.steps += 1
        stats.drafted += len(tree) - 1
        tree_rows = out[: block.tree_size]  # (n, V): logits after each tree node
        if stop_now:
            job.work.commit(1, kid, self.fed)
            self.fed += 1
            stats.per_step.append(0)
            return tree_rows[0]
        max_new_tokens, eos = job.request.max_new_tokens, job.eos_ids

        def stop(token: int, count: int) -> bool:
            return token in eos or len(kid.tokens) + count >= max_new_tokens

        def choose_at(i: int) -> int:
            token = self.choose(tree_rows[i])
            self.extend(token)
            return token

        walk = accept_walk(tree, choose_at, stop)
        self.learn(tree, walk, block)
        walk = self.accept(walk, block, tree_rows)
        self.judge(block, len(walk), time.perf_counter() - clock)
        if self.look is not None:
            outputs = out[block.tree_size :].argmax(-1).tolist()
            accepted = sum(1 for _, _, node in walk if node is not None)
            self.look.update(pending, outputs, accepted)
        if walk[-1][2] is not None:  # the last emitted token was a draft: already fed
            return tree_rows[walk[-1][2]]
        return None

    def run(self) -> GenerateResult:
        """The first token from the parent's logits; then steps until done. From the
        first token on, one token is always chosen but not yet fed (``pending``), and
        each step feeds it with its drafts."""
        job, stats = self.job, self.stats
        result = GenerateResult(drafting=stats)
        if job.request.cancelled:
            return result  # nothing generated: the cache still holds the parent
        logits = job.logits[None]  # (1, V)
        first = self.choose(logits[0])
        self.extend(first)
        self.kid = job.writer.new_child(job.parent, self.params.as_dict(), job.request.seed)
        self.emit(logits[:1], [first])
        self.start_ledger()
        last_row = None
        while last_row is None:
            last_row = self.step()
        stats.emitted = len(self.kid.tokens)
        assert self.fed == len(self.kid.tokens), "every emitted token is fed"
        self.sources.note(self.kid)  # indexed as it grew
        # Under an injected context the columns are not at the child's path positions.
        stored = self.fed if job.kv.assembled is None else 0
        done = job.finish([self.kid], self.base, [stored], last_row)  # (V,)
        result.children = done.children
        return result
