"""Draws drawn ahead (``sample.ahead``) are the draws ``sample.chain.draw`` makes."""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.sample.chain import (
    DrawAhead,
    SamplingParams,
    make_generators,
    race_pick,
    sample_step,
    sampling_probs,
)


def _distributions(count: int, vocab: int, seed: int) -> list[torch.Tensor]:
    """Peaked, flat and cut rows (zeros where a sampler removed a token)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(count):
        logits = torch.randn(vocab, generator=g) * (0.5 + 3 * (i % 4))
        probs = logits.softmax(-1)
        if i % 3 == 0:
            probs = torch.where(probs >= probs.topk(min(7, vocab)).values[-1], probs, 0.0)
        rows.append(probs)
    return rows


@pytest.mark.parametrize("vocab", [5, 1000, 49152])
def test_a_race_picks_what_multinomial_draws_from_the_same_generator(vocab):
    rows = _distributions(40, vocab, seed=vocab)
    (plain,) = make_generators(11, 1)
    ahead = DrawAhead(make_generators(11, 1)[0], vocab, xtc=False)
    want = [int(torch.multinomial(p, 1, generator=plain)) for p in rows]
    got = [int(race_pick(p[None], [ahead.take()[1]])) for p in rows]
    assert got == want
    assert len(set(want)) > 1  # the draws are not all the same token


def test_peeking_ahead_does_not_change_the_draws():
    vocab = 300
    rows = _distributions(30, vocab, seed=1)
    (plain,) = make_generators(5, 1)
    want = [int(torch.multinomial(p, 1, generator=plain)) for p in rows]
    ahead = DrawAhead(make_generators(5, 1)[0], vocab, xtc=False)
    got = []
    for i, p in enumerate(rows):
        if i % 4 == 0:
            ahead.race(i % 7)  # look a varying distance ahead first
        got.append(int(race_pick(p[None], [ahead.take()[1]])))
    assert got == want


def test_the_global_generator_gives_the_same_draws_too():
    vocab = 200
    rows = _distributions(20, vocab, seed=2)
    with torch.random.fork_rng():
        torch.manual_seed(9)
        want = [int(torch.multinomial(p[None], 1)[0, 0]) for p in rows]
        torch.manual_seed(9)
        ahead = DrawAhead(None, vocab, xtc=False)
        ahead.race(3)
        got = [int(race_pick(p[None], [ahead.take()[1]])) for p in rows]
    assert got == want


@pytest.mark.parametrize(
    "settings",
    [
        dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
        dict(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.05),
        dict(temperature=1.0, mirostat=2, mirostat_tau=3.0),
    ],
    ids=["session-samplers", "xtc", "mirostat"],
)
def test_sample_step_with_draws_ahead_chooses_the_same_tokens(settings):
    """A sampler that draws XTC's coin before each token, or threads mirostat's state,
    spends the draws ahead in plain decoding's order."""
    params = SamplingParams(**settings)
    vocab = 64
    g = torch.Generator().manual_seed(3)
    logits = [torch.randn(1, vocab, generator=g) * 3 for _ in range(25)]
    generators = make_generators(21, 1)
    ahead = [DrawAhead(make_generators(21, 1)[0], vocab, params.xtc_active)]
    plain_state = ahead_state = None
    want, got = [], []
    for i, row in enumerate(logits):
        token, plain_state = sample_step(row, params, generators, state=plain_state)
        want.append(int(token))
        if i % 5 == 0:
            ahead[0].race(2)
        token, ahead_state = sample_step(row, params, None, state=ahead_state, ahead=ahead)
        got.append(int(token))
    assert got == want
    assert len(set(want)) > 2


def test_a_race_under_a_draft_estimate_agrees_with_the_draw_more_than_the_top_token():
    """Why drafts read the races: with an estimate close to the model's distribution,
    ``argmax(q / E)`` is the token drawn far more often than q's most likely token."""
    params = SamplingParams(temperature=0.8)
    g = torch.Generator().manual_seed(0)
    vocab, trials = 50, 400
    raced = top = 0
    for t in range(trials):
        logits = torch.randn(1, vocab, generator=g) * 2
        p = sampling_probs(logits, params)[0]
        q = sampling_probs(logits + 0.3 * torch.randn(1, vocab, generator=g), params)[0]
        ahead = DrawAhead(torch.Generator().manual_seed(t), vocab, xtc=False)
        race = ahead.race(0)
        drawn = int(race_pick(p[None], [ahead.take()[1]]))
        raced += int((q / race).argmax()) == drawn
        top += int(q.argmax()) == drawn
    assert raced > 1.5 * top, (raced, top)
    assert raced > 0.6 * trials
