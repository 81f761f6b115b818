"""Branch switches on paths longer than n_ctx: what the window already holds is kept
(exact, when the window is the same), re-rotated (approximate, flagged) when the
target's window starts later, and recomputed only where nothing else will do.

The tiny RoPE model with n_ctx 32 keeps 8 tokens and shifts in blocks of 12: a path of
54 tokens sees 8 + positions 32..54, one of 58 sees 8 + positions 44..58."""

from __future__ import annotations

import pytest

from tests.helpers import ForwardCounter, assert_matches_recompute, make_loom


def tokens(count: int, salt: int = 0) -> list[int]:
    return [(i * 37 + 11 * salt + 5) % 200 + 3 for i in range(count)]


@pytest.fixture
def window_loom(tiny_llama_dir):
    loom = make_loom(tiny_llama_dir, n_ctx=32)
    assert (loom.runner.window.n_keep, loom.runner.window.n_discard) == (8, 12)
    return loom


def branches(loom, main_tail: int, other_tail: int):
    prefix = loom.append_tokens(loom.root, tokens(50))
    main = loom.append_tokens(prefix, tokens(main_tail, salt=1))
    other = loom.append_tokens(prefix, tokens(other_tail, salt=2))
    return prefix, main, other


def test_a_sibling_in_the_same_window_computes_only_its_own_tokens(window_loom):
    loom = window_loom
    _prefix, main, other = branches(loom, 4, 5)  # 54 and 55 tokens: the same shift
    loom.next_logits(main)
    counter = ForwardCounter(loom)
    loom.next_logits(other)
    assert counter.tokens == 5  # other's own tokens, not its 23-column window
    assert_matches_recompute(loom, other)
    assert loom.is_exact(other)
    counter.tokens = 0
    loom.next_logits(main)
    assert counter.tokens == 4 and loom.is_exact(main)
    assert_matches_recompute(loom, main)


def test_a_later_window_is_re_rotated_flagged_and_refreshed_exactly(window_loom):
    loom = window_loom
    _prefix, main, other = branches(loom, 4, 8)  # 54 and 58 tokens: shifts 24 and 36
    loom.next_logits(main)
    counter = ForwardCounter(loom)
    loom.next_logits(other)
    assert counter.tokens == 8  # only other's tokens: the prefix's columns were moved
    assert loom.runner.work.approx_from == loom.runner.window.n_keep
    assert other.approx and not loom.is_exact(other)
    # An exact recompute of the window on demand...
    loom.refresh(other)
    assert loom.is_exact(other) and loom.runner.work.approx_from is None
    assert_matches_recompute(loom, other)
    # ...and the shorter sibling's window (starting earlier) is recomputed, exact.
    assert_matches_recompute(loom, main)
    assert loom.is_exact(main)


def test_a_later_window_after_an_approximate_move_stays_flagged(window_loom):
    loom = window_loom
    prefix, main, other = branches(loom, 4, 8)
    third = loom.append_tokens(prefix, tokens(9, salt=3))  # 59 tokens: shift 36 too
    loom.next_logits(main)
    loom.next_logits(other)  # re-rotated: the buffer's prefix columns are approximate
    counter = ForwardCounter(loom)
    loom.next_logits(third)
    assert counter.tokens == 9  # the moved columns are reused...
    assert third.approx and not loom.is_exact(third)  # ...and flagged on the new path too


def test_recompute_when_re_rotation_is_off_is_exact(window_loom):
    loom = window_loom
    loom.runner.rerotate_window = False
    _prefix, main, other = branches(loom, 4, 8)
    loom.next_logits(main)
    counter = ForwardCounter(loom)
    loom.next_logits(other)
    assert counter.tokens == 58 - 8 - 36  # the whole window after the kept start
    assert_matches_recompute(loom, other)
    assert loom.is_exact(other) and loom.runner.work.approx_from is None


def test_a_path_that_outgrows_the_window_re_rotates_the_plain_columns(window_loom):
    loom = window_loom
    short = loom.append_tokens(loom.root, tokens(30))  # fits: no shift
    counter = ForwardCounter(loom)
    longer = loom.append_tokens(short, tokens(14, salt=4))  # 44 tokens: shift 12
    assert counter.tokens == 14  # the 30 columns moved, not recomputed
    assert longer.approx and not short.approx
    assert_matches_recompute(loom, short)  # the plain path is still exact
    loom.refresh(longer)
    assert_matches_recompute(loom, longer)
