"""The KV memory budget: LRU eviction keeps tokens, recomputes exactly, never the
active path."""

from __future__ import annotations

import pytest

from loomterm.engine.local.budget import parse_size
from loomterm.errors import InputError
from tests.helpers import assert_matches_recompute, make_loom

PROMPT = "The quick brown fox jumps over the lazy dog."


def test_sizes_parse():
    assert parse_size("512M") == 512 << 20
    assert parse_size("2g") == 2 << 30
    assert parse_size("1.5K") == 1536
    assert parse_size(1000) == 1000
    assert parse_size(None) is None
    with pytest.raises(InputError):
        parse_size("lots")


def test_many_branches_stay_under_a_small_cap(family, tiny_llama_dir, tiny_gpt2_dir):
    folder = tiny_llama_dir if family == "llama" else tiny_gpt2_dir
    probe = make_loom(folder)
    node = probe.append(probe.root, PROMPT)
    per_token = node.kv.numel() * node.kv.element_size() // len(node.tokens)
    cap = per_token * 120
    loom = make_loom(folder, kv_budget=cap)
    root = loom.append(loom.root, PROMPT)
    peak = 0
    leaves = []
    for i in range(12):
        kids = loom.generate(root, 12, n=2, temperature=1.0, seed=i)
        leaves += kids
        (deeper,) = loom.generate(kids[0], 10, temperature=1.0, seed=100 + i)
        leaves.append(deeper)
        peak = max(peak, loom.kv_bytes().total)
        active = sum(n.kv.numel() * n.kv.element_size() for n in deeper.path() if n.kv is not None)
        assert loom.kv_bytes().total <= max(cap, active)
    assert peak <= cap
    assert loom.runner.evictions > 0
    evicted = [n for n in loom.tree.nodes.values() if n.kv is None and n.tokens]
    assert evicted, "the cap should have forced evictions"
    # Every node, evicted or not, still has its tokens and its exact logits.
    for leaf in leaves:
        assert_matches_recompute(loom, leaf)
        # The active path is resident after use.
        assert all(n.kv is not None for n in leaf.path() if n.tokens)
        assert loom.kv_bytes().total <= max(cap, per_token * leaf.end)


def test_eviction_of_an_approximate_node_recomputes_it_exactly(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 8, temperature=0)
    fast = loom.splice(kid, 2, 3, " slow", exact=False)
    assert not loom.is_exact(fast)
    other = loom.append(loom.root, "Something else entirely.")
    loom.next_logits(other)
    for item in fast.path():
        if item.approx:
            loom.evict(item)
    assert loom.is_exact(fast)
    assert_matches_recompute(loom, fast)
