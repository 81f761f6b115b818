"""Re-rotation per RoPE convention: shifting cached keys equals recomputing them."""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.kv.rope import rerotate
from tests.helpers import assert_matches_recompute, make_loom
from tests.tiny_models import build_tiny_family

SHIFTABLE = {
    "qwen2": "half",
    "neox": "half",
    "phi": "half",
    "gptj": "interleaved",
    "llama-linear": "half",
    "llama-yarn": "half",
}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("families")
    names = [*SHIFTABLE, "llama-dynamic"]
    return {name: build_tiny_family(base / name, name) for name in names}


def test_llama_half_split_shift_equals_recompute(llama_loom):
    loom = llama_loom
    assert loom.runner.rope is not None and loom.runner.rope.convention == "half"
    tokens = loom.encode("The quick brown fox jumps over the lazy dog.")
    for delta in (1, 7, 300):
        at_zero = loom.runner.fresh_kv(tokens, 0)  # (L, 2, H, T, D)
        at_delta = loom.runner.fresh_kv(tokens, delta)
        moved = rerotate(at_zero[:, 0], delta, loom.runner.rope)
        assert (moved - at_delta[:, 0]).abs().max() < 1e-4
        back = rerotate(at_delta[:, 0], -delta, loom.runner.rope)
        assert (back - at_zero[:, 0]).abs().max() < 1e-4
        assert (at_zero[:, 1] - at_delta[:, 1]).abs().max() < 1e-4  # values do not move


@pytest.mark.parametrize("family", sorted(SHIFTABLE))
def test_each_convention_is_proven_and_shifts_exactly(family, family_dirs):
    loom = make_loom(family_dirs[family])
    assert loom.runner.rope is not None, f"{family} should be re-ropeable"
    assert loom.runner.rope.convention == SHIFTABLE[family]
    tokens = loom.encode("Once upon a time, in a land far away")
    at_zero = loom.runner.fresh_kv(tokens, 0)
    at_delta = loom.runner.fresh_kv(tokens, 53)
    moved = rerotate(at_zero[:, 0], 53, loom.runner.rope)
    scale = at_delta[:, 0].abs().max()
    assert (moved - at_delta[:, 0]).abs().max() / scale < 1e-4
    # A fast splice works there, and refresh brings it back to exact.
    node = loom.append(loom.root, "Once upon a time, in a land far away, there lived")
    fast = loom.splice(node, 2, 3, " long", exact=False)
    assert not loom.is_exact(fast)
    loom.refresh(fast)
    assert_matches_recompute(loom, fast)


def test_a_wrong_convention_does_not_pass(family_dirs):
    loom = make_loom(family_dirs["gptj"])
    tokens = loom.encode("Once upon a time")
    at_zero = loom.runner.fresh_kv(tokens, 0)
    at_delta = loom.runner.fresh_kv(tokens, 9)
    wrong = type(loom.runner.rope)("half", loom.runner.rope.inv_freq)
    moved = rerotate(at_zero[:, 0], 9, wrong)
    assert (moved - at_delta[:, 0]).abs().max() > 1e-3


def test_unshiftable_models_fall_back_to_exact(family_dirs, gpt2_loom):
    dynamic = make_loom(family_dirs["llama-dynamic"])
    for loom in (dynamic, gpt2_loom):
        assert loom.runner.rope is None
        node = loom.append(loom.root, "Once upon a time, in a land far away, there lived")
        spliced = loom.splice(node, 2, 3, " long", exact=False)  # asks for fast...
        assert loom.is_exact(spliced)  # ...gets exact
        assert_matches_recompute(loom, spliced)


def test_fast_splice_reuses_the_suffix_keys_rotated(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, "The quick brown fox jumps over the lazy dog.")
    old_tokens = loom.tokens(node)
    source_kv = node.kv.clone()
    insert = loom.encode(" very very")
    from tests.helpers import ForwardCounter

    with ForwardCounter(loom) as counter:
        fast = loom.splice(node, 2, 3, " very very", exact=False)
    # Only the inserted tokens were computed, plus the final token (for the logits) and
    # the token before the insert (for the first inserted token's probability).
    assert counter.tokens <= len(insert) + 2
    assert loom.tokens(fast) == old_tokens[:2] + insert + old_tokens[3:]
    delta = len(insert) - 1
    expected = rerotate(source_kv[:, 0, :, 3:], delta, loom.runner.rope)
    # The last token is computed again for the logits, and the node keeps that copy
    # (the buffer's, which the next step attends to); the rest is the rotated source.
    assert torch.allclose(fast.kv[:, 0, :, :-1], expected[:, :, :-1], atol=1e-6)
    assert torch.equal(fast.kv[:, 1, :, :-1], source_kv[:, 1, :, 3:-1])
    assert fast.approx and not loom.is_exact(fast)
