"""Weave: automatic expansion, checked on the tiny models against full recomputes."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from loomterm.engine.loom.weave import (
    Candidate,
    WeaveRequest,
    branch_logprobs,
    derive_seed,
    effective_rating,
    mean_logprob,
    perplexity,
    rank,
    weave,
)
from loomterm.errors import InputError, LoomError
from tests.helpers import ForwardCounter, assert_matches_recompute, make_loom

PROMPT = "Once upon a time, in a land far away,"


def start(loom):
    return loom.append(loom.root, PROMPT)


@torch.inference_mode()
def recomputed_logprobs(loom, begin, node) -> list[float]:
    """Log-probabilities of the tokens below ``begin`` on ``node``'s path, from one plain
    forward pass over the whole path (no cache)."""
    tokens = loom.tokens(node)
    ids = torch.tensor([tokens], device=loom.runner.device)
    config = loom.runner.model.config
    saved, config._attn_implementation = config._attn_implementation, "sdpa"
    try:
        logits = loom.runner.model(input_ids=ids).logits[0].float()  # (T, V)
    finally:
        config._attn_implementation = saved
    logprobs = logits.log_softmax(-1)
    return [float(logprobs[i - 1, tokens[i]]) for i in range(begin.end, len(tokens))]


def shape(result) -> list[list[tuple]]:
    """Each level's nodes as (parent's place, tokens): equal for equal trees."""
    place = {result.start.id: "start"}
    out = []
    for depth, level in enumerate(result.levels, 1):
        rows = []
        for i, node in enumerate(level.made):
            place[node.id] = f"{depth}.{i}"
            rows.append((place[node.parent.id], tuple(node.tokens)))
        out.append(rows + [("kept", tuple(place[n.id] for n in level.kept))])
    return out


# -- the pure parts --------------------------------------------------------------------------
def test_scores_are_pure_functions():
    assert mean_logprob([-1.0, -3.0, None]) == -2.0
    assert perplexity([-1.0, -3.0]) == pytest.approx(math.exp(2.0))
    assert mean_logprob([]) == -math.inf and perplexity([None]) == math.inf
    assert derive_seed(7, 2, 1) == derive_seed(7, 2, 1) != derive_seed(7, 1, 2)
    assert 0 <= derive_seed(10**30, 5) < 2**32


def test_rank_keeps_the_best_ties_to_the_first_made():
    c = [Candidate(0, -2.0), Candidate(1, -1.0), Candidate(2, -1.0), Candidate(3, -0.5)]
    assert rank(c, 2) == [3, 1]
    assert rank(c, 10) == [3, 1, 2, 0]
    assert rank([Candidate(0, -math.inf), Candidate(1, -9.0)], 1) == [1]


def test_rank_by_rating_prunes_bad_and_keeps_good_first():
    c = [
        Candidate(0, -0.1, -1),  # the model's favourite, rated bad
        Candidate(1, -5.0, 1),  # the model's least favourite, rated good
        Candidate(2, -1.0),
        Candidate(3, -2.0, -1),
    ]
    assert rank(c, 2, by_rating=True) == [1, 2]
    assert rank(c, 4, by_rating=True) == [1, 2]  # bad stays out even with room
    assert rank(c, 2) == [0, 2]  # other scores ignore ratings


# -- the weave on a model -----------------------------------------------------------------
def test_weave_shape_tags_and_exactness(llama_loom):
    loom = llama_loom
    node = start(loom)
    before = len(loom.tree.nodes)
    result = weave(loom, WeaveRequest(node, n=3, depth=3, keep=2, tokens=6, seed=1))
    assert not result.cancelled
    assert result.made_per_level == [3, 6, 6] and result.kept_per_level == [2, 2, 2]
    assert len(loom.tree.nodes) == before + 15 == before + WeaveRequest(node, 3, 3, 2).planned
    kept_above = [node]
    for level in result.levels:
        # Each kept node above got n children, in one batch; only the kept grew.
        assert {n.parent.id for n in level.made} == {k.id for k in kept_above}
        for parent in kept_above:
            assert len([n for n in level.made if n.parent is parent]) == 3
        for pruned in set(level.made) - set(level.kept):
            assert pruned.children == [] and pruned.id in loom.tree.nodes  # kept, not grown
        kept_above = level.kept
    for made in result.nodes:
        assert made.meta["weave"] == result.run_id
        assert 1 <= len(made.tokens) <= 6
        assert loom.tree.nodes[made.id] is made
    for kept in (k for level in result.levels for k in level.kept):
        assert_matches_recompute(loom, kept)
    assert result.best is result.levels[-1].kept[0]
    assert result.requests == 1 + 2 + 2 and result.seconds > 0


@pytest.mark.parametrize("score", ["logprob", "perplexity"])
def test_pruning_keeps_the_best_by_the_score(llama_loom, score):
    loom = llama_loom
    node = start(loom)
    result = weave(loom, WeaveRequest(node, n=4, depth=2, keep=2, tokens=5, score=score, seed=3))
    for level in result.levels:
        # The score from a full recompute of each branch, not from the recorded values.
        truth = {
            n.id: sum(lps) / len(lps)
            for n in level.made
            for lps in [recomputed_logprobs(loom, node, n)]
        }
        recorded = {n.id: mean_logprob(branch_logprobs(node, n)) for n in level.made}
        assert all(recorded[i] == pytest.approx(truth[i], abs=1e-4) for i in truth)
        best = sorted(level.made, key=lambda n: -truth[n.id])[:2]
        assert [n.id for n in level.kept] == [n.id for n in best]
        for n in level.made:
            want = math.exp(-truth[n.id]) if score == "perplexity" else truth[n.id]
            assert result.scores[n.id] == pytest.approx(want, rel=1e-3)


def test_a_seed_gives_the_same_tree(tiny_llama_dir):
    def once(seed, batched=True):
        loom = make_loom(tiny_llama_dir)
        request = WeaveRequest(start(loom), n=3, depth=3, keep=2, tokens=5, seed=seed)
        request.batched = batched
        return shape(weave(loom, request))

    first = once(11)
    assert once(11) == first
    assert once(12) != first
    assert once(11, batched=False) == once(11, batched=False)


def test_batched_levels_run_one_batch_per_parent(llama_loom):
    loom = llama_loom
    node = start(loom)
    with ForwardCounter(loom) as counter:
        result = weave(loom, WeaveRequest(node, n=4, depth=2, keep=2, tokens=4, seed=5))
    assert result.requests == 3  # the start, then each of the 2 kept
    assert counter.batches.count(4) >= 3 * 3  # every decode step fed 4 rows together
    assert max(counter.batches) == 4
    with ForwardCounter(loom) as counter:
        one = weave(loom, WeaveRequest(node, 4, 2, 2, tokens=4, seed=5, batched=False))
    assert one.requests == len(one.nodes) == 12 and max(counter.batches) == 1


def test_ratings_steer_the_weave_as_they_come(llama_loom):
    loom = llama_loom
    node = start(loom)
    seen = {}

    def progress(level, done, total):
        if level == 1 and done == total:
            # Level 1 is made, not yet ranked: the model's worst is rated good, its best bad.
            ordered = sorted(node.children, key=lambda n: mean_logprob(n.logprobs))
            seen["good"], seen["bad"] = ordered[0], ordered[-1]
            loom.set_meta(ordered[0], rating=1)
            loom.set_meta(ordered[-1], rating=-1)
        if level == 2 and done == 4 and "late" not in seen:
            # The good one has grown; the other kept node (the best unrated) is rated
            # bad before its turn: it is not expanded.
            unrated = [n for n in node.children if "rating" not in n.meta]
            seen["late"] = max(unrated, key=lambda n: mean_logprob(n.logprobs))
            loom.set_meta(seen["late"], rating=-1)

    reports = []
    request = WeaveRequest(node, n=4, depth=3, keep=2, tokens=4, score="rating", seed=2)
    request.progress = lambda *report: (reports.append(report), progress(*report))
    result = weave(loom, request)
    assert [r for r in reports if r[0] == 2] == [(2, 0, 8), (2, 4, 8), (2, 4, 4)]
    level1, level2 = result.levels[0], result.levels[1]
    assert level1.kept == [seen["good"], seen["late"]]  # good first, though the model
    assert seen["bad"] not in level1.kept  # liked it least; bad pruned, though liked most
    assert seen["late"].children == []
    assert len(level2.made) == 4 and all(n.parent is seen["good"] for n in level2.made)
    assert all(n.parent in level2.kept for n in result.levels[2].made)
    assert len(result.levels[2].made) == 8


def test_a_rating_counts_for_the_branch_below_it(llama_loom):
    """Unrated nodes inherit the nearest rating inside the weave, not above its start."""
    loom = llama_loom
    node = start(loom)
    loom.set_meta(node, rating=-1)  # above the weave: not the weave's business
    result = weave(loom, WeaveRequest(node, n=2, depth=2, keep=2, tokens=3, score="rating"))
    assert result.kept_per_level == [2, 2]
    bad = result.levels[0].kept[0]
    loom.set_meta(bad, rating=-1)
    kids = [n for n in result.levels[1].made if n.parent is bad]
    assert kids and all(effective_rating(node, n) == -1 for n in kids)
    assert all(effective_rating(node, n) is None for n in result.levels[1].made if n not in kids)


@pytest.mark.parametrize("where", ["inside a batch", "between batches"])
def test_cancel_keeps_what_was_made_and_the_tree_stays_exact(loom, where):
    node = start(loom)
    cancel = threading.Event()
    count = {"tokens": 0}

    def on_token(*_):
        count["tokens"] += 1
        if where == "inside a batch" and count["tokens"] == 4 * 4 + 2 * 4 + 1:
            cancel.set()  # level 2, the first batch's third step

    def progress(level, done, total):
        if where == "between batches" and level == 2 and done == 3:
            cancel.set()

    request = WeaveRequest(node, n=4 if where == "inside a batch" else 3, depth=3, keep=2)
    request.tokens, request.seed, request.cancel = 4, 9, cancel
    request.on_token, request.progress = on_token, progress
    result = weave(loom, request)
    assert result.cancelled and len(result.levels) == 2
    made = result.nodes
    if where == "inside a batch":
        assert result.made_per_level == [4, 4]
        assert all(len(n.tokens) < 4 for n in result.levels[1].made)  # stopped midway
    else:
        assert result.made_per_level == [3, 3]  # the second parent never started
    assert all(n.tokens and loom.tree.nodes[n.id] is n for n in made)
    assert result.best in result.levels[1].made  # a stopped level is still ranked
    for n in made:
        assert_matches_recompute(loom, n)
    # The tree goes on as usual from what the weave left.
    (more,) = loom.generate(result.best, 3, temperature=0)
    assert_matches_recompute(loom, more)


def test_cancelled_before_it_starts_makes_nothing(llama_loom):
    loom = llama_loom
    node = start(loom)
    cancel = threading.Event()
    cancel.set()
    before = len(loom.tree.nodes)
    result = weave(loom, WeaveRequest(node, cancel=cancel))
    assert result.cancelled and result.nodes == [] and result.best is None
    assert len(loom.tree.nodes) == before


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"n": 0}, "weave n must be a whole number from 1 to 64"),
        ({"depth": 100}, "weave depth must be"),
        ({"keep": 1.5}, "weave keep must be"),
        ({"tokens": 0}, "weave tokens per node"),
        ({"score": "vibes"}, "weave score must be one of logprob, perplexity, rating"),
        ({"settings": {"temperature": -1}}, "emperature"),
        ({"settings": {"max_new_tokens": 3}}, "weave settings cannot set max_new_tokens"),
    ],
)
def test_bad_requests_are_one_line_and_make_nothing(llama_loom, changes, message):
    loom = llama_loom
    node = start(loom)
    before = len(loom.tree.nodes)
    request = WeaveRequest(node, **changes)
    with pytest.raises(LoomError) as caught:
        weave(loom, request)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert len(loom.tree.nodes) == before


def test_weave_from_the_empty_root_is_refused(llama_loom):
    with pytest.raises(InputError, match="nothing to weave from"):
        weave(llama_loom, WeaveRequest(llama_loom.root))


def test_progress_counts_every_level(llama_loom):
    loom = llama_loom
    reports = []
    request = WeaveRequest(start(loom), n=2, depth=3, keep=1, tokens=3, seed=1)
    request.progress = lambda *report: reports.append(report)
    weave(loom, request)
    assert reports == [(1, 0, 2), (1, 2, 2), (2, 0, 2), (2, 2, 2), (3, 0, 2), (3, 2, 2)]
