"""Context shift: past n_ctx, generation keeps going on a window, as llama.cpp does."""

from __future__ import annotations

import pytest

from loomterm.errors import ContextError
from tests.helpers import assert_matches_recompute, make_loom, window_tokens


@pytest.mark.parametrize("n", [1, 3])
def test_generation_runs_past_n_ctx(family, tiny_llama_dir, tiny_gpt2_dir, n):
    folder = tiny_llama_dir if family == "llama" else tiny_gpt2_dir
    loom = make_loom(folder, n_ctx=32)
    assert (loom.runner.window.n_keep, loom.runner.window.n_discard) == (8, 12)
    node = loom.append(loom.root, "Once upon a time, in a land far away,")
    kids = loom.generate(node, 70, n=n, temperature=1.0, seed=4)
    for kid in kids:
        assert kid.end > loom.n_ctx
        if loom.runner.rope is None:
            # Absolute positions: the window was recomputed, so it is exact.
            assert loom.is_exact(kid)
            assert_matches_recompute(loom, kid)
        else:
            # RoPE: the kept keys were re-rotated in place, flagged approximate...
            assert kid.approx and not loom.is_exact(kid)
            # ...and refresh recomputes the window exactly.
            loom.refresh(kid)
            assert loom.is_exact(kid)
            assert_matches_recompute(loom, kid)
    # Going back below n_ctx uses the cached, exact prefix again.
    short = loom.truncate(kids[0], 20)
    assert_matches_recompute(loom, short)


def test_window_keeps_the_start_and_the_latest_tokens(llama_loom):
    loom = llama_loom
    loom_small = make_loom(loom.runner.loaded.source, n_ctx=32)
    tokens = list(range(100))
    seen = window_tokens(loom_small, tokens)
    assert seen[:8] == tokens[:8]
    assert seen[-1] == 99 and len(seen) <= 32


def test_long_append_is_windowed(gpt2_loom, tiny_gpt2_dir):
    loom = make_loom(tiny_gpt2_dir, n_ctx=24)
    node = loom.append(loom.root, "The quick brown fox jumps over the lazy dog. " * 4)
    assert node.end > 24
    assert_matches_recompute(loom, node)


def test_n_ctx_limits(tiny_gpt2_dir, tiny_llama_dir):
    with pytest.raises(ContextError, match="too small"):
        make_loom(tiny_llama_dir, n_ctx=4)
    with pytest.raises(ContextError, match="positions"):
        make_loom(tiny_gpt2_dir, n_ctx=100_000)
