"""The alternatives table: drafts from the model's recorded expectations."""

from __future__ import annotations

import math

import pytest

from loomterm.engine.decode.draft_table import (
    TABLE,
    WIDTH,
    AlternativesTable,
    propose_raced,
    table_near,
)
from loomterm.engine.decode.draft_tree import DraftTree

PROMPT = "Once upon a time, in a land far away, there lived a weaver who wove stories."


def test_estimate_prefers_the_pair_and_backs_off_to_one_token():
    table = AlternativesTable(temperature=1.0)
    # After (1, 2) the model expected 7 (and 8 a little); after (9, 2) it expected 5.
    table.add_position([1, 2], 7, [(7, math.log(0.9)), (8, math.log(0.1))])
    table.add_position([9, 2], 5, [(5, 0.0)])
    best = table.estimate([1, 2])
    assert [t for t, _ in best][:2] == [7, 5]  # the pair's 7 first, the one-token 5 next
    assert sum(q for _, q in best) == pytest.approx(1.0)
    assert [t for t, _ in table.estimate([4, 2])][0] in (5, 7)  # unknown pair: back off
    assert table.estimate([4, 3]) == []  # nothing ever followed 3


def test_temperature_tempers_and_greedy_keeps_the_top_token():
    top = [(10, math.log(0.6)), (11, math.log(0.4))]
    warm, cold, greedy = (AlternativesTable(t) for t in (2.0, 0.5, 0.0))
    for table in (warm, cold, greedy):
        table.add_position([3], 12, top)
    share = {name: dict(t.estimate([3])) for name, t in (("w", warm), ("c", cold), ("g", greedy))}
    assert share["c"][10] / share["c"][11] > share["w"][10] / share["w"][11]
    assert set(share["g"]) == {10, 12}  # the top token and the one that followed


def test_propose_grows_best_first_within_the_budget():
    table = AlternativesTable(temperature=1.0)
    table.add_run([1, 2, 3, 4, 1, 2, 3, 5], None)  # after (1, 2): 3; after (2, 3): 4 or 5
    tree = DraftTree(2, capacity=64)
    added = table.propose(tree, [1, 2], budget=3)
    assert added == 3 == len(tree) - 1
    assert tree.tokens[1] == 3 and tree.parents[1] == 0  # the sure token first
    assert set(tree.tokens[2:]) <= {4, 5, 1} and all(p == 1 for p in tree.parents[2:])
    assert set(tree.sources[1:]) == {TABLE}
    assert table.propose(DraftTree(2, capacity=64), [1, 2], budget=0) == 0
    full = DraftTree(2, capacity=2)
    assert table.propose(full, [1, 2], budget=5) == 1  # the trie's capacity holds
    assert len(table.estimate([2, 3])) <= WIDTH


def test_table_near_reads_the_path_tail_and_the_branches(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 12, temperature=0)
    table = table_near(node, (0.0,), budget=4)  # 4 tokens of the path, then the branch
    assert len(table.after_one) <= 4 + len(kid.tokens)
    # Every generated position's top token is in the table after its two tokens.
    path = loom.tokens(node) + kid.tokens
    at = len(loom.tokens(node))
    for j, alts in enumerate(kid.top):
        pos = at + j
        key = (path[pos - 2], path[pos - 1])
        assert alts[0][0] in table.after_two[key]


def test_sampled_regenerations_accept_table_drafts_and_keep_the_text(loom):
    node = loom.append(loom.root, PROMPT)
    loom.generate(node, 24, temperature=0.8, seed=1000)
    from_table = 0
    for seed in range(4):
        loom.update_settings(drafting="off")
        (plain,) = loom.generate(node, 24, temperature=0.8, seed=seed)
        loom.update_settings(drafting="tree")
        (drafted,) = loom.generate(node, 24, temperature=0.8, seed=seed)
        assert drafted.tokens == plain.tokens
        from_table += loom.last_result.drafting.by_source.get(TABLE, 0)
    assert from_table > 0


def test_the_samplers_cuts_leave_out_what_cannot_be_drawn():
    top = [(1, math.log(0.5)), (2, math.log(0.3)), (3, math.log(0.15)), (4, math.log(0.01))]
    plain = AlternativesTable(1.0)
    min_p = AlternativesTable(1.0, min_p=0.05)  # 4 is under 5% of the best token
    top_k = AlternativesTable(1.0, top_k=2)
    top_p = AlternativesTable(1.0, top_p=0.75)  # 1 and 2 reach it
    for table in (plain, min_p, top_k, top_p):
        table.add_position([9], 99, top)
    assert set(dict(plain.estimate([9]))) >= {1, 2, 3}  # 4 of them (WIDTH) kept
    assert 4 not in dict(min_p.estimate([9]))
    assert set(dict(top_k.estimate([9]))) == {1, 2, 99}
    assert set(dict(top_p.estimate([9]))) == {1, 2, 99}


def test_table_sampler_reads_the_request():
    from loomterm.engine.decode.draft_table import table_sampler
    from loomterm.engine.sample.chain import SamplingParams

    assert table_sampler(SamplingParams(temperature=0)) == (0.0, 0, 1.0, 0.0)
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    assert table_sampler(params) == (0.8, 40, 0.95, 0.05)


def test_a_raced_chain_drafts_what_each_coming_draw_would_pick_under_the_estimate():
    """``propose_raced``: at depth d the token with the largest q / E_d (not q's
    likeliest), the next best of that ranking beside it at the first depths, and the
    chain goes on after the pick."""
    table = AlternativesTable(temperature=1.0)
    # After (1, 2): 3 (0.5), 4 (0.3), 6 (0.2); after (2, 4): 5 only; after (2, 3): 7 only.
    top = [(3, math.log(0.5)), (4, math.log(0.3)), (6, math.log(0.2))]
    table.add_position([1, 2], 3, top)
    table.add_position([2, 4], 5, [(5, 0.0)])
    table.add_position([2, 3], 7, [(7, 0.0)])
    # The first draw's race makes 4 win (0.3 / 0.1 > 0.5 / 1.0 > 0.2 / 2.0).
    races = {0: {3: 1.0, 4: 0.1, 6: 2.0, 5: 1.0, 7: 1.0}, 1: {5: 1.0, 7: 1.0, 3: 1.0, 4: 1.0}}
    asked = []

    def race_at(depth, tokens):
        asked.append(depth)
        return [races.get(depth, {}).get(t, 1.0) for t in tokens]

    tree = DraftTree(2, capacity=64)
    added = propose_raced(table, tree, [1, 2], 4, race_at, widths=(2,))
    first = tree.children[0]
    assert set(first) == {4, 3}  # the race's pick and its runner-up
    assert tree.sources[first[4]] == tree.sources[first[3]] == TABLE
    chain = tree.children[first[4]]
    assert list(chain) == [5]  # the chain goes on after 4, not after q's likeliest 3
    assert tree.children[first[3]] == {}  # a runner-up is a leaf
    assert added == len(tree) - 1 == 3  # nothing ever followed 5: the chain ends
    assert asked[:2] == [0, 1]
    # Without a race the same estimate drafts its likeliest token first.
    assert table.estimate([1, 2])[0][0] == 3
    assert propose_raced(table, DraftTree(2, capacity=64), [1, 2], 0, race_at) == 0
