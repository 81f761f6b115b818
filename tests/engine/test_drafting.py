"""Drafted decoding: lossless against plain decoding, and the draft machinery itself."""

from __future__ import annotations

import math
import threading
from collections import Counter

import pytest
import torch

from loomterm.engine.decode.draft_block import Lookahead, build_block
from loomterm.engine.decode.draft_tree import (
    POOL,
    Acceptance,
    Cost,
    DraftTree,
    TreeIndex,
    accept_walk,
    best_depth,
    nearby_nodes,
    walk_trials,
)
from loomterm.engine.generation import GenerateRequest
from loomterm.engine.sample.chain import SamplingParams, filter_logits
from loomterm.tree import Origin, Tree
from tests.helpers import ForwardCounter, assert_matches_recompute, reference_logits

PROMPT = "Once upon a time, in a land far away, there lived a weaver who wove stories."


def _generate(loom, node, mode, *args, **kwargs):
    loom.update_settings(drafting=mode)
    (kid,) = loom.generate(node, *args, **kwargs)
    return kid


# -- lossless: greedy ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["tree", "lookahead"])
def test_greedy_drafted_equals_plain(loom, mode):
    node = loom.append(loom.root, PROMPT)
    plain = _generate(loom, node, "off", 40, temperature=0)
    first = _generate(loom, node, mode, 40, temperature=0)
    again = _generate(loom, node, mode, 40, temperature=0)  # siblings are now drafts
    assert first.tokens == plain.tokens == again.tokens
    for kid in (first, again):
        assert [alts[0][0] for alts in kid.top] == kid.tokens  # records from verified logits
        assert kid.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
        assert [[t for t, _ in alts] for alts in kid.top] == [
            [t for t, _ in alts] for alts in plain.top
        ]
    stats = loom.last_result.drafting
    assert stats.lookahead == (mode == "lookahead")
    assert stats.accepted > 0 and stats.steps < len(again.tokens)  # drafts did the work


def test_drafted_kv_matches_recompute(loom):
    node = loom.append(loom.root, PROMPT)
    _generate(loom, node, "off", 30, temperature=0)
    kid = _generate(loom, node, "tree", 30, temperature=0)
    assert loom.last_result.drafting.accepted > 0
    assert kid.kv is not None and kid.kv.shape[3] == len(kid.tokens)
    assert loom.runner.work.length == kid.end  # the working cache holds the child's path
    # The cached logits after the child are valid: no forward pass to read them.
    with ForwardCounter(loom) as counter:
        logits = loom.next_logits(kid)
        assert counter.tokens == 0
    torch.testing.assert_close(
        logits, reference_logits(loom, loom.tokens(kid)), rtol=1e-4, atol=1e-4
    )
    assert_matches_recompute(loom, kid)
    # Stored KV is right too: come back to the child from elsewhere, then continue it.
    loom.next_logits(node)
    assert_matches_recompute(loom, kid)
    grandkid = _generate(loom, kid, "tree", 12, temperature=0)
    assert_matches_recompute(loom, grandkid)


def test_lookahead_kv_matches_recompute(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, "The quick brown fox jumps over the lazy dog.")
    kid = _generate(loom, node, "lookahead", 48, temperature=0)
    assert_matches_recompute(loom, kid)
    plain = _generate(
        loom,
        loom.append(loom.root, "The quick brown fox jumps over the lazy dog."),
        "off",
        48,
        temperature=0,
    )
    assert kid.tokens == plain.tokens


def test_lookahead_pool_alone_is_lossless_and_accepted(llama_loom):
    """Lookahead's own drafts (no tree drafts at all) verified in the same forward."""
    from loomterm.engine.decode.draft_tree import DraftConfig
    from loomterm.engine.decode.drafted import drafted_decode
    from loomterm.engine.generation import GenerateRequest, NodeWriter
    from loomterm.engine.sample.chain import SamplingParams

    loom = llama_loom
    node = loom.append(loom.root, "The quick brown fox jumps over the lazy dog.")
    plain = list(_generate(loom, node, "off", 60, temperature=0).tokens)
    config = DraftConfig(lookahead=True, tree_budget=0, window=5, ngram=4, guesses=5)
    request = GenerateRequest(node, 60, 1, SamplingParams(temperature=0))
    with loom.exclusive():
        logits = loom.runner.prepare(node)
        job = loom.runner.decode_job(request, NodeWriter(loom.tree, loom.notify), logits)
        result = drafted_decode(job, config, loom.runner.drafting, loom.tree.nodes)
    kids, stats = result.children, result.drafting
    assert kids[0].tokens == plain
    assert stats.lookahead and stats.accepted > 0  # pool n-grams were accepted
    assert_matches_recompute(loom, kids[0])


def test_regeneration_from_a_cut_drafts_from_the_old_tail(loom):
    node = loom.append(loom.root, PROMPT)
    long = _generate(loom, node, "off", 40, temperature=0)
    expected = list(long.tokens)
    cut = loom.truncate(long, node.end + 12)  # splits ``long``
    kid = _generate(loom, cut, "tree", 28, temperature=0)
    assert kid.tokens == expected[12:]
    stats = loom.last_result.drafting
    assert stats.accepted >= 20 and stats.steps <= 8


def test_budget_and_cancel_inside_a_drafted_burst(loom):
    node = loom.append(loom.root, PROMPT)
    plain = _generate(loom, node, "off", 40, temperature=0)
    short = _generate(loom, node, "tree", 7, temperature=0)
    assert short.tokens == plain.tokens[:7]
    assert_matches_recompute(loom, short)

    seen: list[int] = []
    cancel = threading.Event()

    def on_token(child, token, piece):
        seen.append(token)
        if len(seen) == 5:
            cancel.set()

    kid = _generate(loom, node, "tree", 40, temperature=0, on_token=on_token, cancel=cancel)
    assert kid.tokens == seen == plain.tokens[:5]  # the burst stopped at the fifth token
    assert_matches_recompute(loom, kid)


def test_cancelled_before_the_first_token_adds_nothing(loom):
    node = loom.append(loom.root, PROMPT)
    cancel = threading.Event()
    cancel.set()
    loom.update_settings(drafting="tree")
    assert loom.generate(node, 10, temperature=0, cancel=cancel) == []
    assert_matches_recompute(loom, node)


def test_repetition_penalty_is_applied_to_drafted_tokens(loom):
    node = loom.append(loom.root, PROMPT)
    plain = _generate(loom, node, "off", 30, temperature=0, repetition_penalty=1.3)
    _generate(loom, node, "off", 30, temperature=0)  # a different sibling to draft from
    kid = _generate(loom, node, "tree", 30, temperature=0, repetition_penalty=1.3)
    assert kid.tokens == plain.tokens


# -- lossless: sampling ----------------------------------------------------------------------
def test_same_seed_same_text_with_or_without_drafting(loom):
    node = loom.append(loom.root, PROMPT)
    for seed in range(3):
        plain = _generate(loom, node, "off", 25, temperature=0.8, top_k=20, seed=seed)
        drafted = _generate(loom, node, "tree", 25, temperature=0.8, top_k=20, seed=seed)
        assert drafted.tokens == plain.tokens


def test_auto_keeps_the_text_per_seed_while_its_ledger_turns_drafting_on_and_off(loom):
    """``auto`` judges each pass by its measured time (``decode.draft_ledger``): where it
    drafts and where it decodes plainly depends on this machine's timings, the text never
    does. The ledger has timed both kinds of step."""
    node = loom.append(loom.root, PROMPT)
    _generate(loom, node, "off", 25, temperature=0.8, seed=100)  # a sibling to draft from
    for seed in range(4):
        plain = _generate(loom, node, "off", 25, temperature=0.8, seed=seed)
        auto = _generate(loom, node, "auto", 25, temperature=0.8, seed=seed)
        assert auto.tokens == plain.tokens
    ledger = loom.runner.drafting.ledgers[("sampled", False)]
    assert ledger.drafted >= ledger.warmup and ledger.plains
    assert ledger.cost_ratio is not None and ledger.cost_ratio > 0


@pytest.fixture
def one_thread():
    """Tiny matrices gain nothing from threads, and lose a lot on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_sampling_keeps_the_distribution(llama_loom, one_thread):
    """Two sampled tokens (top_k=5: 25 outcomes) over many seeds, with the loom's earlier
    samples as drafts, against the model's exact two-token distribution."""
    loom = llama_loom
    params = SamplingParams(temperature=1.0, top_k=5)
    node = loom.append(loom.root, "The quick brown fox")
    path = loom.tokens(node)
    first = filter_logits(reference_logits(loom, path)[None], params).softmax(-1)[0]
    exact: dict[tuple[int, int], float] = {}
    for a in first.nonzero().flatten().tolist():
        second = filter_logits(reference_logits(loom, path + [a])[None], params).softmax(-1)[0]
        for b in second.nonzero().flatten().tolist():
            exact[(a, b)] = float(first[a] * second[b])

    loom.update_settings(drafting="tree")
    samples = 800
    counts: Counter = Counter()
    drafted = accepted = 0
    for seed in range(samples):
        (kid,) = loom.generate(node, 2, temperature=1.0, top_k=5, seed=seed)
        counts[tuple(kid.tokens)] += 1
        stats = loom.last_result.drafting
        drafted += stats.drafted
        accepted += stats.accepted
    assert 0 < accepted < drafted  # drafts were offered, and both accepted and rejected
    assert set(counts) <= set(exact)
    # Pearson's chi-square over outcomes expected at least 5 times (the rest pooled).
    big = {o: p for o, p in exact.items() if samples * p >= 5}
    cells = [(counts[o], samples * p) for o, p in big.items()]
    rest = samples - sum(c for c, _ in cells), samples * (1 - sum(big.values()))
    if rest[1] >= 5:
        cells.append(rest)
    chi2 = sum((seen - want) ** 2 / want for seen, want in cells)
    dof = len(cells) - 1
    # Fixed seeds make this deterministic; the bound is about the 0.9999 quantile.
    assert chi2 < dof + 4.0 * math.sqrt(2 * dof) + 10, (chi2, dof)
    tv = 0.5 * sum(abs(counts[o] / samples - p) for o, p in exact.items())
    assert tv < 0.12, tv  # a sanity bound; the chi-square above is the test
    print(f"chi2 {chi2:.1f} on {dof} dof, total variation {tv:.3f}, {accepted}/{drafted} accepted")


# -- when drafting applies -------------------------------------------------------------------
def test_drafting_only_for_one_continuation_that_fits(loom):
    node = loom.append(loom.root, PROMPT)

    def config(n, max_new_tokens, mode="auto"):
        request = GenerateRequest(node, max_new_tokens, n, SamplingParams(), drafting=mode)
        return loom.runner.drafting_for(request)

    assert config(1, 20) is not None
    assert config(4, 20) is None
    assert config(1, loom.n_ctx) is None  # would need a window shift
    assert config(1, 20, "off") is None


def test_setting_off_uses_the_plain_loop(loom):
    node = loom.append(loom.root, PROMPT)
    _generate(loom, node, "tree", 5, temperature=0)
    assert loom.last_result.drafting is not None
    _generate(loom, node, "off", 5, temperature=0)
    assert loom.last_result.drafting is None  # the result says no drafting ran


def test_small_context_falls_back_and_stays_exact(family, tiny_llama_dir, tiny_gpt2_dir):
    """A generation that would not fit the window with its block of drafts decodes
    plainly (drafting never runs), through context shifts, exactly as plain decoding."""
    from tests.helpers import make_loom

    folder = tiny_llama_dir if family == "llama" else tiny_gpt2_dir
    loom = make_loom(folder, n_ctx=40)
    node = loom.append(loom.root, "The quick brown fox jumps")
    loom.update_settings(drafting="tree")

    # Drafting is on and applies where the block fits: 3 tokens do, 4 do not.
    def config(max_new_tokens):
        request = GenerateRequest(node, max_new_tokens, 1, SamplingParams(), drafting="tree")
        return loom.runner.drafting_for(request)

    block = config(3)
    assert block is not None and node.end + 3 + block.tree_budget + 1 == loom.n_ctx
    assert config(4) is None
    loom.generate(node, 3, temperature=0)
    assert loom.last_result.drafting is not None  # the observable works: that one drafted

    (kid,) = loom.generate(node, 60, temperature=0)
    assert loom.last_result.drafting is None  # the long one took the plain loop
    assert len(kid.tokens) == 60 and node.end + 60 > loom.n_ctx  # it crossed the window

    # Plain decoding on the same window gives the same tokens and records.
    plain_loom = make_loom(folder, n_ctx=40)
    plain_loom.update_settings(drafting="off")
    (plain,) = plain_loom.generate(
        plain_loom.append(plain_loom.root, loom.text(node)), 60, temperature=0
    )
    assert kid.tokens == plain.tokens
    assert kid.logprobs == pytest.approx(plain.logprobs, abs=1e-4)

    # Against recomputes: every token before the first shift is the argmax of a plain
    # forward over its prefix; models without RoPE rebuild the window at each shift, so
    # theirs stay exact all the way (RoPE models re-rotate: approximate, and flagged).
    path = loom.tokens(node)
    fit = loom.n_ctx - node.end
    exact = len(kid.tokens) if loom.runner.rope is None else fit
    for i in range(exact):
        want = reference_logits(loom, path + kid.tokens[:i]).argmax().item()
        assert kid.tokens[i] == want, f"token {i} is not the recompute's argmax"
    assert kid.approx == (loom.runner.rope is not None)


def test_kv_stored_from_before_a_window_shift_is_exact(family, tiny_llama_dir, tiny_gpt2_dir):
    """A child's KV is handed over before a window shift moves its columns (the bug
    this test was written against, found by two reviews, is fixed)."""
    from tests.helpers import make_loom

    loom = make_loom(tiny_llama_dir if family == "llama" else tiny_gpt2_dir, n_ctx=40)
    node = loom.append(loom.root, "The quick brown fox jumps")
    (kid,) = loom.generate(node, 60, temperature=0)
    assert kid.kv is not None
    stored = kid.kv.shape[3]
    fresh = loom.runner.fresh_kv(loom.tokens(kid)[: node.end + stored], 0)  # (L, 2, H, T, D)
    torch.testing.assert_close(kid.kv, fresh[:, :, :, node.end :], rtol=1e-4, atol=1e-4)
    head = loom.truncate(kid, loom.n_ctx)  # a branch point before any shift
    assert_matches_recompute(loom, head)


# -- the machinery, without a model ----------------------------------------------------------
def _chain(tree: Tree, parent, tokens):
    return tree.add(parent, tokens, Origin.USER)


def test_tree_index_drafts_from_siblings_and_cousins():
    tree = Tree()
    doc = _chain(tree, tree.root, [1, 2, 3, 4])
    sibling = _chain(tree, doc, [5, 6, 7, 8])
    _chain(tree, sibling, [9, 10])
    _chain(tree, sibling, [11])
    cousin_parent = _chain(tree, tree.root, [1, 2, 3, 4, 5, 6])
    _chain(tree, cousin_parent, [12, 13])
    nodes = nearby_nodes(doc, None, 1000)
    assert nodes[:2] == [tree.root, doc] and sibling in nodes
    index = TreeIndex(max_ngram=3, per_key=8)
    for node in reversed(nodes):
        index.add(node)
    draft = DraftTree(5, capacity=32)
    best = index.propose(draft, [3, 4, 5], 1, lambda k: 8)
    assert best == 3
    continuations = _paths(draft)
    assert (5, 6, 7, 8, 9, 10) in continuations and (5, 6, 7, 8, 11) in continuations
    assert (5, 6, 12, 13) in continuations  # the cousin, through the shared 2-gram (5, 6)


def _paths(draft: DraftTree) -> set[tuple[int, ...]]:
    leaves = [i for i in range(len(draft)) if not draft.children[i]]
    out = set()
    for leaf in leaves:
        seq, i = [], leaf
        while i >= 0:
            seq.append(draft.tokens[i])
            i = draft.parents[i]
        out.add(tuple(reversed(seq)))
    return out


def test_draft_tree_capacity_depth_and_mask():
    draft = DraftTree(7, capacity=5)
    draft.add_sequence([1, 2, 3], max_depth=2)
    draft.add_sequence([1, 4], max_depth=8)
    draft.add_sequence([5, 6, 7], max_depth=8)  # only room for one more node
    assert draft.tokens == [7, 1, 2, 4, 5]
    assert draft.depths == [0, 1, 2, 2, 1]
    assert not draft.is_chain()
    mask = draft.ancestry()
    assert mask[3].tolist() == [True, True, False, True, False]  # 4 sees 1 and the root
    assert mask[4].tolist() == [True, False, False, False, True]


def test_block_layout_for_lookahead():
    look = Lookahead(window=3, ngram=4, guesses=2, seed_tokens=[9])
    draft = DraftTree(7, capacity=4)
    draft.add_sequence([1, 2], max_depth=8)
    block = build_block(draft, look)
    early = (3 - 1) + 3  # level 0 slots 1..2, level 1 slots 0..2
    assert block.tree_start == early and block.tree_size == 3 and block.keep == 3 + 3
    assert len(block.ids) == early + 3 + 3
    # Level 2 (last), slot 2 sits 4 positions after the root and sees its column.
    row = early + 3 + 2
    assert block.offsets[row] == 4
    seen = block.mask[row].nonzero().flatten().tolist()
    assert seen == [0, 1, 4, early, row]  # level0 slots 1, 2; level1 slot 2; root; itself
    # Draft tokens do not see the window and vice versa.
    assert (
        not block.mask[early + 1, :early].any() and not block.mask[row, early + 1 : early + 3].any()
    )


def test_lookahead_collects_ngrams_and_shifts():
    look = Lookahead(window=2, ngram=3, guesses=2, seed_tokens=[0])
    look.levels = [[0, 11], [21, 22]]
    look.update(root=5, outputs=[31, 32], accepted=0)
    assert look.candidates(5) == [(21, 31)] and look.candidates(11) == [(22, 32)]
    assert look.levels == [[21, 22], [31, 32]]
    look.update(root=6, outputs=[41, 42], accepted=2)  # stale window: refilled from level 0
    assert look.levels == [[31, 32], [6, 22]]


def test_accept_walk_stops_on_end_and_budget():
    draft = DraftTree(0, capacity=8)
    draft.add_sequence([1, 2, 3], max_depth=8)
    answers = {0: 1, 1: 2, 2: 9}
    walk = accept_walk(draft, lambda i: answers[i], lambda token, count: False)
    assert [(t, n is not None) for _, t, n in walk] == [(1, True), (2, True), (9, False)]
    walk = accept_walk(draft, lambda i: answers[i], lambda token, count: token == 2)
    assert [t for _, t, _ in walk] == [1, 2] and walk[-1][2] is not None
    assert walk_trials(draft, accept_walk(draft, lambda i: answers[i], lambda t, c: False)) == [
        (POOL, True),
        (POOL, True),
        (POOL, False),
    ]


def test_draft_depth_follows_acceptance():
    cpu = Cost.for_device("cpu")
    assert best_depth(0.05, cpu, 15) == 0  # rarely accepted: a plain step is cheaper
    assert best_depth(0.3, cpu, 15) >= 1  # a few drafts ride along almost free
    assert best_depth(0.3, Cost.for_device("cpu", onednn=False), 15) == 0
    assert 0 < best_depth(0.7, cpu, 15) < best_depth(0.97, cpu, 15) <= 15
    acceptance = Acceptance(cpu, 15)
    acceptance.update([(3, False)] * 30)
    assert acceptance.depth(3) == 0
    acceptance.update([(4, True)] * 30)
    assert acceptance.depth(4) >= 10


@pytest.mark.default_model
def test_default_model_greedy_drafting_is_lossless():
    from importlib import resources

    from loomterm.engine import Loom

    loom = Loom.load(device="cpu", dtype="float32")
    loom.update_settings(
        token_healing="off"
    )  # the prompt is cut mid-word; drafting is compared here
    corpus = resources.files("loomterm.bench").joinpath("corpus.txt").read_text()
    start = corpus.index("III. A Morning")
    node = loom.append(loom.root, corpus[start : start + 600])
    plain = _generate(loom, node, "off", 48, temperature=0)
    for mode in ("tree", "lookahead"):
        kid = _generate(loom, node, mode, 48, temperature=0)
        assert kid.tokens == plain.tokens
        assert loom.last_result.drafting.accepted > 0
    assert_matches_recompute(loom, kid, tol=2e-4)
    expected = list(plain.tokens)
    cut = loom.truncate(plain, node.end + 16)
    kid = _generate(loom, cut, "auto", 32, temperature=0)
    assert kid.tokens == expected[16:]
