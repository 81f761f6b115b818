"""Siblings on llama.cpp: one batch a step, or one decode each, whichever has cost less
per token (``BatchCosts``); the sibling decoder gives the same tree either way."""

from __future__ import annotations

from loomterm.engine.llamacpp.batching import RETRY, BatchCosts
from tests.llamacpp.test_runner import PROMPT, exact, new_loom


def test_each_way_is_tried_then_the_cheaper_taken_and_the_other_retried():
    costs = BatchCosts()
    assert costs.batched(4)  # nothing measured: the batch first
    costs.record(True, 4, 0.040)  # 10 ms a token
    assert not costs.batched(4)  # then one decode each
    costs.record(False, 4, 0.028)  # 7 ms a token: cheaper
    picks = [costs.batched(4) for _ in range(2 * RETRY)]
    assert picks.count(True) == 2  # the batch again once every RETRY steps
    assert costs.batched(3)  # another width: its batch is tried too
    costs.record(True, 3, 0.012)  # 4 ms a token: cheaper than single decodes
    costs.steps = 0
    assert costs.batched(3) and not costs.batched(4)


def test_a_running_mean_follows_a_change():
    costs = BatchCosts()
    costs.record(True, 2, 0.020)
    costs.record(False, 2, 0.016)
    assert not costs.batched(2)
    for _ in range(8):  # single decodes got slower (a busy moment, another thread count)
        costs.record(False, 2, 0.030)
    assert costs.batched(2)


def test_siblings_decoded_one_by_one_are_exact_and_cost_one_token_each(
    binding, default_gguf, fresh
):
    loom = new_loom(default_gguf)
    try:
        loom.runner.batching = BatchCosts(batch={4: 1.0, 3: 1.0, 2: 1.0}, single=1e-6)
        node = loom.append(loom.root, PROMPT)
        loom.next_logits(node)
        before = loom.runner.llama.evaluated
        kids = loom.generate(node, 8, n=4, seed=3, temperature=1.0)
        # every sampled token but an end of sequence is fed back: one evaluation each
        eos = loom.runner.eos_ids
        fed = sum(len(k.tokens) - (k.tokens[-1] in eos) for k in kids)
        assert loom.runner.llama.evaluated - before == fed
        assert loom.runner.batching.single > 1e-6  # what the steps cost, measured
        for kid in kids:
            exact(loom, kid, fresh)
    finally:
        loom.runner.close()


def test_a_generation_measures_both_ways(binding, default_gguf):
    loom = new_loom(default_gguf)
    try:
        node = loom.append(loom.root, PROMPT)
        loom.generate(node, 6, n=4, seed=1, temperature=1.0)
        costs = loom.runner.batching
        assert costs.single is not None and costs.batch, costs
    finally:
        loom.runner.close()
