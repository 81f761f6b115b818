"""The samplers of issue 12, each against the property that defines it (llama.cpp's
definitions), on distributions built by hand; the chain's order; neutral defaults that
reproduce the old sampler bit for bit; seeds that reproduce a row at any batch size."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from loomterm.engine.sample import chain as S
from loomterm.engine.sample.chain import (
    DryBreakers,
    SamplerState,
    SamplingParams,
    make_generators,
    sample,
    sample_step,
    sampling_probs,
)
from loomterm.errors import InputError

NO_BREAKERS = dict(dry_sequence_breakers=())
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def logits_of(probs: list[float]) -> torch.Tensor:
    """(1, V) logits whose softmax is ``probs``."""
    return torch.tensor([probs], dtype=torch.float64).log().float()


def kept(logits: torch.Tensor) -> set[int]:
    """Token ids of row 0 still possible."""
    return set(torch.isfinite(logits[0]).nonzero().flatten().tolist())


# -- the old sampler, verbatim (before issue 12), as the reference for neutral knobs --------
def _legacy_repetition(logits, history, penalty):
    if penalty == 1.0 or history.numel() == 0:
        return logits
    picked = logits.gather(1, history)
    picked = torch.where(picked > 0, picked / penalty, picked * penalty)
    return logits.scatter(1, history, picked)


def _legacy_filter(logits, params):
    logits = logits.float() / max(params.temperature, 1e-6)
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= params.top_p
        drop = drop_sorted.scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if params.min_p > 0.0:
        probs = logits.softmax(-1)
        floor = params.min_p * probs.amax(-1, keepdim=True)
        logits = logits.masked_fill(probs < floor, float("-inf"))
    return logits


def _legacy_probs(logits, params, history=None):
    if history is not None:
        logits = _legacy_repetition(logits, history, params.repetition_penalty)
    if params.greedy:
        probs = torch.zeros_like(logits, dtype=torch.float32)
        return probs.scatter_(1, logits.argmax(-1, keepdim=True), 1.0)
    return _legacy_filter(logits, params).softmax(-1)


def _legacy_sample(logits, params, generators=None, history=None):
    if params.greedy:
        if history is not None:
            logits = _legacy_repetition(logits, history, params.repetition_penalty)
        return logits.argmax(-1)
    return S.draw(_legacy_probs(logits, params, history), generators)


OLD_GRID = list(
    itertools.product(
        [0.0, 0.7, 1.0, 1.6],  # temperature
        [1.0, 0.9],  # top_p
        [0, 5],  # top_k
        [0.0, 0.05],  # min_p
        [1.0, 1.3],  # repetition_penalty
    )
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_neutral_defaults_are_the_old_sampler_bit_for_bit(dtype):
    rand = torch.Generator().manual_seed(0)
    for i, knobs in enumerate(OLD_GRID):
        params = SamplingParams(*knobs)
        logits = (torch.randn(3, 40, generator=rand) * 3).to(dtype)
        history = torch.randint(0, 40, (3, 12), generator=rand) if i % 3 else None
        assert torch.equal(
            sampling_probs(logits, params, history), _legacy_probs(logits, params, history)
        )
        for seed in range(3):
            new = sample(logits, params, make_generators(seed, 3), history)
            old = _legacy_sample(logits, params, make_generators(seed, 3), history)
            assert torch.equal(new, old), (knobs, seed)
        # filter_logits is the old stages 4-8 too (tests/engine/test_drafting.py uses it).
        assert torch.equal(S.filter_logits(logits, params), _legacy_filter(logits, params))


def test_new_knobs_default_to_neutral():
    params = SamplingParams()
    assert not (params.penalties_active or params.dry_active or params.xtc_active)
    assert not params.dynatemp_active and params.mirostat == 0 and params.typical_p == 1.0
    assert params.logit_bias == () and params.verifiable and not params.uses_history
    # llama.cpp's defaults for the knobs that only matter once their sampler is on.
    assert params.dry_base == 1.75 and params.dry_allowed_length == 2
    assert params.dry_sequence_breakers == ("\n", ":", '"', "*")
    assert params.xtc_threshold == 0.1 and params.mirostat_tau == 5.0
    assert params.mirostat_eta == 0.1 and params.dynatemp_exponent == 1.0


# -- XTC -----------------------------------------------------------------------------------------
XTC_PROBS = [0.4, 0.3, 0.15, 0.1, 0.05]


def test_xtc_removes_every_top_choice_but_the_least_likely():
    logits = logits_of(XTC_PROBS)
    out = S.xtc_filter(logits, 1.0, 0.12, torch.zeros(1))  # 0.4, 0.3, 0.15 are above
    assert kept(out) == {2, 3, 4}
    out = S.xtc_filter(logits, 1.0, 0.25, torch.zeros(1))  # 0.4, 0.3 are above
    assert kept(out) == {1, 2, 3, 4}
    # Through the whole chain, with probability 1: the two top tokens never come out.
    params = SamplingParams(xtc_probability=1.0, xtc_threshold=0.12)
    assert kept(sampling_probs(logits, params).log()) == {2, 3, 4}
    picks = {int(sample(logits, params, make_generators(seed, 1))[0]) for seed in range(200)}
    assert picks == {2, 3, 4}


def test_xtc_with_fewer_than_two_above_the_threshold_removes_none():
    logits = logits_of(XTC_PROBS)
    assert kept(S.xtc_filter(logits, 1.0, 0.35, torch.zeros(1))) == set(range(5))  # one above
    flat = logits_of([0.2] * 5)
    assert kept(S.xtc_filter(flat, 1.0, 0.21, torch.zeros(1))) == set(range(5))  # none above
    # p counts over the candidates left: after top-k 2, both (0.57, 0.43) are above 0.4.
    params = SamplingParams(top_k=2, xtc_probability=1.0, xtc_threshold=0.4)
    assert kept(S.filter_logits(logits, params, torch.zeros(1))) == {1}
    # A threshold above 0.5 never acts (llama.cpp), and then no coin is drawn.
    assert not SamplingParams(xtc_probability=1.0, xtc_threshold=0.6).xtc_active


def test_xtc_coin_per_row_from_its_generator():
    params = SamplingParams(xtc_probability=0.5, xtc_threshold=0.12)
    gens = make_generators(7, 4)
    coins = S.xtc_coins(params, gens, 4)
    fresh = make_generators(7, 4)
    assert torch.equal(coins, torch.cat([torch.rand(1, generator=g) for g in fresh]))
    # A row applies XTC iff its coin <= probability (llama.cpp skips when chance > p).
    logits = logits_of(XTC_PROBS).expand(4, -1)
    out = S.xtc_filter(logits, 0.5, 0.12, torch.tensor([0.1, 0.9, 0.5, 0.51]))
    assert torch.isinf(out[:, 0]).tolist() == [True, False, True, False]
    # Off: nothing is drawn, so the token stream is the plain one.
    assert S.xtc_coins(SamplingParams(), gens, 4) is None


def test_xtc_law_without_a_coin_is_the_mixture():
    logits = logits_of(XTC_PROBS)
    q = 0.3
    params = SamplingParams(xtc_probability=q, xtc_threshold=0.12)
    plain = S.filter_logits(logits, params, torch.ones(1)).softmax(-1)
    excluded = S.filter_logits(logits, params, torch.zeros(1)).softmax(-1)
    assert torch.allclose(plain, logits.softmax(-1))
    law = sampling_probs(logits, params)
    assert torch.allclose(law, (1 - q) * plain + q * excluded)
    # ... and draws (coin, then token) follow it.
    counts = torch.zeros(5)
    for seed in range(3000):
        counts[int(sample(logits, params, make_generators(seed, 1))[0])] += 1
    assert (counts / 3000 - law[0]).abs().max() < 0.03


# -- typical-p ----------------------------------------------------------------------------------
def _typical_reference(probs: list[float], mass: float) -> set[int]:
    """Meister et al. / llama.cpp, in plain floats: sort by |-log p - H|; keep the
    shortest prefix whose mass exceeds ``mass``."""
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    order = sorted(range(len(probs)), key=lambda i: abs(-math.log(probs[i]) - entropy))
    out, total = set(), 0.0
    for i in order:
        out.add(i)
        total += probs[i]
        if total > mass:
            break
    return out


def test_typical_keeps_the_locally_typical_set():
    # H = 1.384 nats; |-log p - H| = 0.585, 0.656, 0.331, 0.226, 1.835: the order is
    # 3, 2, 0, 1, 4, so typical-p drops the most likely token before the middle ones.
    probs = [0.45, 0.13, 0.18, 0.20, 0.04]
    logits = logits_of(probs)
    assert kept(S.typical_filter(logits, 0.15)) == {3}  # 0.20 > 0.15
    assert kept(S.typical_filter(logits, 0.3)) == {3, 2}  # 0.38 > 0.3: token 0 is out
    assert kept(S.typical_filter(logits, 0.5)) == {3, 2, 0}
    assert kept(S.typical_filter(logits, 1.0)) == set(range(5))
    rand = torch.Generator().manual_seed(1)
    for _ in range(200):
        probs = torch.softmax(torch.randn(12, generator=rand, dtype=torch.float64) * 2, -1)
        mass = float(torch.rand(1, generator=rand)) * 0.98 + 0.01
        got = kept(S.typical_filter(probs.log().float()[None], mass))
        assert got == _typical_reference(probs.tolist(), mass), mass


# -- DRY ---------------------------------------------------------------------------------------
DRY = dict(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)


def dry_cut(history: list[int], vocab: int = 100, breakers=None, **knobs) -> torch.Tensor:
    """What DRY subtracts from each token's logit after ``history``: (V,)."""
    params = SamplingParams(**{**DRY, **NO_BREAKERS, **knobs})
    state = SamplerState(dry_breakers=breakers)
    zeros = torch.zeros(1, vocab)
    return -S.adjust_logits(zeros, params, [history], state)[0]


def expected(cuts: dict[int, float], vocab: int = 100) -> torch.Tensor:
    out = torch.zeros(vocab)
    for token, cut in cuts.items():
        out[token] = cut
    return out


def test_dry_penalty_is_multiplier_times_base_to_the_excess_length():
    # "10 11 12" ends the text and was followed by 13 before: 13 would extend a 3-repeat.
    history = [10, 11, 12, 13, 20, 21, 10, 11, 12]
    assert torch.allclose(dry_cut(history), expected({13: 0.8 * 1.75 ** (3 - 2)}))
    # Two earlier repeats of different lengths: each follower gets its own length.
    history = [1, 2, 3, 5, 9, 2, 3, 6, 1, 2, 3]
    assert torch.allclose(dry_cut(history), expected({5: 0.8 * 1.75, 6: 0.8 * 1.0}))
    # One token after two repeats (3 tokens, then 2): its longest counts.
    history = [1, 2, 3, 7, 9, 2, 3, 7, 4, 1, 2, 3]
    assert S.dry_repeat_lengths(history, SamplingParams(**DRY, **NO_BREAKERS)) == {7: 3}


def test_dry_is_zero_below_the_allowed_length():
    history = [10, 11, 13, 5, 6, 10, 11]  # "10 11" repeats: length 2
    assert torch.allclose(dry_cut(history, dry_allowed_length=2), expected({13: 0.8}))
    assert torch.equal(dry_cut(history, dry_allowed_length=3), torch.zeros(100))
    assert torch.equal(dry_cut([1, 2, 3, 1], dry_allowed_length=2), torch.zeros(100))


def test_dry_sequence_breakers_stop_the_match():
    history = [7, 10, 11, 12, 13, 20, 7, 10, 11, 12]  # "7 10 11 12": a 4-repeat
    assert torch.allclose(dry_cut(history), expected({13: 0.8 * 1.75**2}))
    one = DryBreakers.from_sequences
    # The repeat may not reach back across a breaker: it is cut to the tokens after it.
    assert torch.allclose(dry_cut(history, breakers=one([[7]])), expected({13: 0.8 * 1.75}))
    assert torch.allclose(dry_cut(history, breakers=one([[10]])), expected({13: 0.8}))
    assert torch.equal(dry_cut(history, breakers=one([[11]])), torch.zeros(100))  # 1 < 2
    # A two-token breaker "7 10" ends where its tail ends.
    assert torch.allclose(dry_cut(history, breakers=one([[7, 10]])), expected({13: 0.8}))
    # A single-token breaker is never penalised itself.
    history = [1, 2, 3, 9, 4, 1, 2, 3]
    assert torch.allclose(dry_cut(history), expected({9: 0.8 * 1.75}))
    assert torch.equal(dry_cut(history, breakers=one([[9]])), torch.zeros(100))


def test_dry_reads_only_the_last_n_tokens_and_clamps_the_exponent():
    history = [10, 11, 12, 13, 20, 21, 22, 23, 10, 11, 12]
    assert dry_cut(history)[13] > 0
    assert torch.equal(dry_cut(history, dry_penalty_last_n=6), torch.zeros(100))
    assert torch.equal(dry_cut(history, dry_penalty_last_n=0), torch.zeros(100))
    assert dry_cut(history, dry_penalty_last_n=-1)[13] > 0
    # A very long repeat: the exponent stops at log(FLT_MAX) / log(base), as llama.cpp.
    loop = [1, 2, 3] * 100
    cap = int(88.7228391 / math.log(3.0))
    cut = dry_cut(loop, dry_base=3.0)
    assert cut[1].item() == pytest.approx(0.8 * 3.0**cap, rel=1e-5)
    assert math.isfinite(cut[1].item())


def _dry_reference(history, params, singles=frozenset(), limit=None):
    """DRY by brute force: for every earlier position j, the longest common suffix of
    history[:j+1] and history (capped at ``limit``); the token after j extends it."""
    window = history if params.dry_penalty_last_n == -1 else history[-params.dry_penalty_last_n :]
    size, allowed = len(window), params.dry_allowed_length
    limit = size if limit is None else limit
    if size <= allowed or limit < allowed:
        return {}
    out = {}
    for j in range(size - 1):
        n = 0
        while n <= j and n < limit and window[j - n] == window[size - 1 - n]:
            n += 1
        token = window[j + 1]
        if n >= allowed and token not in singles:
            out[token] = max(out.get(token, -1), n)
    return out


def test_dry_matches_a_brute_force_search():
    rand = torch.Generator().manual_seed(3)
    for trial in range(300):
        size = int(torch.randint(0, 40, (1,), generator=rand))
        vocab = 2 + trial % 4  # small vocabularies: many repeats
        history = torch.randint(0, vocab, (size,), generator=rand).tolist()
        params = SamplingParams(
            **{**DRY, "dry_allowed_length": trial % 4},
            **NO_BREAKERS,
            dry_penalty_last_n=[-1, 7, 20][trial % 3],
        )
        assert S.dry_repeat_lengths(history, params) == _dry_reference(history, params)
        # With the token 0 as a breaker: repeats stop after its last occurrence.
        window = (
            history if params.dry_penalty_last_n == -1 else history[-params.dry_penalty_last_n :]
        )
        limit = (
            len(window) - 1 - max(i for i, t in enumerate(window) if t == 0)
            if 0 in window
            else None
        )
        want = _dry_reference(history, params, frozenset({0}), limit)
        assert S.dry_repeat_lengths(history, params, DryBreakers.from_sequences([[0]])) == want


def test_dry_breakers_resolve_from_strings_as_llama_cpp():
    pieces = ["a", "\n", "b\n", "x:", "ab", "*", "q", "za"]
    encode = {"b": [6], "": []}.__getitem__
    breakers = S.resolve_dry_breakers(["\n", "ab"], pieces, lambda s: encode(s))
    # Tokens holding "\n" or "ab" whole are single-token breakers; "a" and "za" end
    # with "a", the start of "ab", so they are heads whose tail is "b" tokenised.
    assert breakers.singles == {1, 2, 4}
    assert breakers.tails[0] == ((6,),) and breakers.tails[7] == ((6,),)
    assert set(breakers.tails) == {0, 1, 2, 4, 7}


def test_dry_needs_its_breakers_resolved():
    params = SamplingParams(**DRY)  # llama.cpp's default breakers, as strings
    with pytest.raises(ValueError, match="resolve_dry_breakers"):
        sample(torch.zeros(1, 10), params, history=[[1, 2, 1]])


# -- mirostat v2 --------------------------------------------------------------------------------
def test_mirostat_v2_truncates_to_surprise_at_most_mu():
    probs = [0.5, 0.25, 0.125, 0.0625, 0.0625]  # surprise 1, 2, 3, 4, 4 bits
    logits = logits_of(probs)
    assert kept(S.mirostat_v2_filter(logits, torch.tensor([2.0]))) == {0, 1}
    assert kept(S.mirostat_v2_filter(logits, torch.tensor([3.5]))) == {0, 1, 2}
    assert kept(S.mirostat_v2_filter(logits, torch.tensor([0.5]))) == {0}  # at least the top
    assert kept(S.mirostat_v2_filter(logits, torch.tensor([9.0]))) == set(range(5))


def test_mirostat_v2_updates_mu_by_eta_times_the_error():
    tau, eta = 1.5, 0.25
    params = SamplingParams(mirostat=2, mirostat_tau=tau, mirostat_eta=eta, top_k=1)
    state = SamplerState.start(params, 2)
    assert state.mu.tolist() == [2 * tau, 2 * tau]  # mu starts at 2 tau
    logits = logits_of([0.5, 0.25, 0.125, 0.0625, 0.0625]).expand(2, -1)
    gens = make_generators(5, 2)
    seen = set()
    for _ in range(30):
        mu = state.mu.clone()
        allowed = S.mirostat_v2_filter(logits, mu).softmax(-1)  # top_k is ignored
        chosen, state = sample_step(logits, params, gens, None, state)
        for row in range(2):
            token = int(chosen[row])
            seen.add(token)
            assert -math.log2(logits.softmax(-1)[row, token]) <= mu[row] or token == 0
            # Surprise under the truncated, renormalised distribution (llama.cpp).
            surprise = -math.log2(allowed[row, token])
            assert state.mu[row].item() == pytest.approx(mu[row] - eta * (surprise - tau), abs=1e-5)
    assert len(seen) > 1  # top_k=1 did not apply: mirostat replaces truncation


def test_mirostat_is_stateful():
    params = SamplingParams(mirostat=2)
    with pytest.raises(ValueError, match="sample_step"):
        sample(torch.zeros(1, 5), params)
    with pytest.raises(ValueError, match="state"):
        sampling_probs(torch.zeros(1, 5), params)
    state = SamplerState.start(params, 3)
    assert state.select([2, 0]).mu.shape == (2,)
    # Greedy wins over mirostat, as llama.cpp's temp 0 leaves one candidate.
    assert (
        int(sample(logits_of([0.2, 0.7, 0.1]), SamplingParams(temperature=0, mirostat=2))[0]) == 1
    )


# -- presence / frequency / repetition over the last n -------------------------------------------
def test_presence_and_frequency_subtract_over_the_last_n_tokens():
    history = [5, 5, 5, 7, 8, 5]
    zeros = torch.zeros(1, 10)

    def cut(**knobs):
        return zeros - S.adjust_logits(zeros, SamplingParams(**knobs), [history])

    got = cut(presence_penalty=0.5, frequency_penalty=0.25)
    want = expected({5: 0.5 + 0.25 * 4, 7: 0.5 + 0.25, 8: 0.5 + 0.25}, 10)
    assert torch.allclose(got[0], want)
    got = cut(presence_penalty=0.5, frequency_penalty=0.25, penalty_last_n=3)  # 7 8 5
    assert torch.allclose(got[0], expected({5: 0.75, 7: 0.75, 8: 0.75}, 10))
    assert torch.equal(cut(presence_penalty=0.5, penalty_last_n=0), torch.zeros(1, 10))
    # Negative values (OpenAI allows down to -2) favour what was said.
    assert cut(presence_penalty=-1.0)[0, 5].item() == -1.0


def test_repetition_penalty_honours_penalty_last_n():
    logits = torch.full((1, 6), 2.0)
    out = S.adjust_logits(
        logits, SamplingParams(repetition_penalty=2.0, penalty_last_n=2), [[1, 2, 3]]
    )
    assert out[0].tolist() == [2.0, 2.0, 1.0, 1.0, 2.0, 2.0]
    out = S.adjust_logits(logits, SamplingParams(repetition_penalty=2.0), [[1, 2, 3]])
    assert out[0].tolist() == [2.0, 1.0, 1.0, 1.0, 2.0, 2.0]  # -1: the whole history
    out = S.adjust_logits(logits, SamplingParams(repetition_penalty=2.0, penalty_last_n=0), [[1]])
    assert torch.equal(out, logits)
    # llama.cpp's one pass: the repetition penalty first, then the counts.
    both = SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5)
    assert S.adjust_logits(logits, both, [[4, 4]])[0, 4].item() == 2.0 / 2 - 0.5 * 2


def test_penalties_per_row_and_ragged_histories():
    logits = torch.zeros(2, 6)
    params = SamplingParams(presence_penalty=1.0)
    out = S.adjust_logits(logits, params, [[1], [2, 3, 3]])  # ragged
    assert out.tolist() == [[0, -1, 0, 0, 0, 0], [0, 0, -1, -1, 0, 0]]
    out2 = S.adjust_logits(logits, params, torch.tensor([[1, 1], [2, 3]]))
    assert out2.tolist() == [[0, -1, 0, 0, 0, 0], [0, 0, -1, -1, 0, 0]]


# -- dynamic temperature ------------------------------------------------------------------------
def test_dynatemp_maps_entropy_to_temperature_at_the_extremes():
    temps = S.dynatemp_temperatures
    uniform = torch.zeros(1, 8)  # H = log N: the top of the range
    assert temps(uniform, 1.0, 0.5, 1.0).item() == pytest.approx(1.5)
    peaked = torch.tensor([[1e4, 0.0, 0.0, 0.0]])  # H = 0: the bottom
    assert temps(peaked, 1.0, 0.5, 1.0).item() == pytest.approx(0.5)
    assert temps(peaked, 0.3, 0.5, 1.0).item() == 0.0  # max(0, T - range)
    # In between: min + (max - min) * (H / log N) ** exponent.
    logits = logits_of([0.7, 0.2, 0.1])
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    h = float(-(p * p.log()).sum() / math.log(3))
    assert temps(logits, 1.0, 0.5, 2.0).item() == pytest.approx(0.5 + 1.0 * h**2, rel=1e-5)
    assert temps(logits, 1.0, 0.5, 0.0).item() == pytest.approx(1.5)  # x ** 0 = 1
    # The candidates are those left (N counts finite logits): after top-k 2, log 2.
    pair = torch.tensor([[3.0, 3.0, 1.0, 0.0]])
    params = SamplingParams(top_k=2, dynatemp_range=0.5)
    assert torch.allclose(S.filter_logits(pair, params)[0, :2], torch.tensor([2.0, 2.0]))
    # A temperature of 0 keeps the argmax only; a single candidate is left as it is.
    assert kept(S.apply_dynatemp(logits_of([0.7, 0.2, 0.1]) * 1e4, 0.3, 0.5, 1.0)) == {0}
    one = torch.tensor([[1.0, float("-inf")]])
    assert torch.equal(S.apply_dynatemp(one, 1.0, 0.5, 1.0), one)


def test_dynatemp_makes_temperature_zero_not_greedy():
    assert SamplingParams(temperature=0).greedy
    assert not SamplingParams(temperature=0, dynatemp_range=0.5).greedy  # in [0, 0.5]
    assert SamplingParams(temperature=0, dynatemp_range=0.5, mirostat=2).greedy


# -- top-n-sigma ------------------------------------------------------------------------------
# llama.cpp's own cases (tests/test-sampling.cpp, ``test_top_n_sigma``): logits are
# log(probs); after the sampler, the distribution over all four tokens.
LLAMA_CPP_TOP_N_SIGMA = [
    ([0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.428571, 0.571429], 1.0),
    ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], 0.0),  # 0 is off (llama.cpp PR 13345)
    ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], 3.0),
]


@pytest.mark.parametrize(("probs", "expected", "n"), LLAMA_CPP_TOP_N_SIGMA)
def test_top_n_sigma_matches_llama_cpp_s_own_cases(probs, expected, n):
    got = sampling_probs(logits_of(probs), SamplingParams(top_n_sigma=n))[0]
    assert got.tolist() == pytest.approx(expected, abs=1e-5)  # llama.cpp's tolerance
    assert S.top_n_sigma_filter(logits_of(probs), n).softmax(-1)[0].tolist() == pytest.approx(
        expected, abs=1e-5
    )


def _top_n_sigma_reference(row: list[float], n: float) -> set[int]:
    """llama.cpp's loop, in float64: max and population std over the finite logits."""
    finite = [x for x in row if math.isfinite(x)]
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((x - mean) ** 2 for x in finite) / len(finite))
    return {i for i, x in enumerate(row) if math.isfinite(x) and x >= max(finite) - n * std}


def test_top_n_sigma_keeps_the_logits_within_n_deviations_of_the_best():
    rand = torch.Generator().manual_seed(23)
    logits = torch.randn(300, 30, generator=rand, dtype=torch.float64) * 2.5
    gone = torch.rand(300, 30, generator=rand, dtype=torch.float64) < 0.3
    logits = logits.masked_fill(gone, float("-inf"))  # removed by an earlier stage
    logits[:, 0] = logits[:, 0].nan_to_num(neginf=1.0)  # at least one candidate left
    for n in (0.3, 1.0, 1.7, 2.5):
        out = S.top_n_sigma_filter(logits, n)
        for b in range(logits.shape[0]):
            assert kept(out[b : b + 1]) == _top_n_sigma_reference(logits[b].tolist(), n)
        assert torch.equal(out[torch.isfinite(out)], logits[torch.isfinite(out)])  # untouched


def test_top_n_sigma_is_off_by_default_and_at_zero_bit_for_bit():
    assert SamplingParams().top_n_sigma == -1.0  # llama.cpp's default: disabled
    rand = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 50, generator=rand) * 3
    base = SamplingParams(temperature=0.8, top_k=20, min_p=0.05)
    for off in (-1.0, 0.0):
        params = SamplingParams(temperature=0.8, top_k=20, min_p=0.05, top_n_sigma=off)
        assert torch.equal(sampling_probs(logits, params), sampling_probs(logits, base))
    assert "top_n_sigma" in base.as_dict()


def test_top_n_sigma_reads_the_same_set_at_any_temperature_and_sits_before_top_k():
    """Scaling a row scales its max and its deviation alike, so the place of the
    temperature does not matter (llama.cpp tempers last); top-k does: it changes the
    deviation of what is left."""
    rand = torch.Generator().manual_seed(9)
    logits = torch.randn(200, 40, generator=rand) * 2
    plain = S.top_n_sigma_filter(logits, 1.2)
    for temperature in (0.3, 0.8, 1.7):
        tempered = S.top_n_sigma_filter(logits / temperature, 1.2)
        assert torch.equal(torch.isfinite(tempered), torch.isfinite(plain))
    params = SamplingParams(temperature=0.7, top_n_sigma=1.2, top_k=12)
    chain = torch.isfinite(S.filter_logits(logits, params))
    sigma_first = S.top_k_filter(S.top_n_sigma_filter(logits / 0.7, 1.2), 12)
    top_k_first = S.top_n_sigma_filter(S.top_k_filter(logits / 0.7, 12), 1.2)
    assert torch.equal(chain, torch.isfinite(sigma_first))
    assert not torch.equal(chain, torch.isfinite(top_k_first))


def test_top_n_sigma_under_greedy_and_mirostat_does_nothing():
    logits = logits_of([0.1, 0.2, 0.3, 0.4])
    greedy = SamplingParams(temperature=0, top_n_sigma=0.01)
    assert int(sample(logits, greedy)[0]) == 3
    params = SamplingParams(mirostat=2, mirostat_tau=10.0)  # mu = 20 bits: keeps all
    state = SamplerState.start(params, 1)
    sigma = SamplingParams(mirostat=2, mirostat_tau=10.0, top_n_sigma=0.01)
    assert torch.equal(
        sampling_probs(logits, sigma, state=state), sampling_probs(logits, params, state=state)
    )
    assert SamplingParams(top_n_sigma=1.0).verifiable  # a function of the logits alone


# -- logit bias -----------------------------------------------------------------------------------
def test_logit_bias_never_makes_a_token_impossible():
    logits = logits_of([0.6, 0.3, 0.1])
    params = SamplingParams(logit_bias={0: "never"})
    assert sampling_probs(logits, params)[0, 0].item() == 0.0
    assert {int(sample(logits, params, make_generators(s, 1))[0]) for s in range(100)} == {1, 2}
    assert int(sample(logits, SamplingParams(temperature=0, logit_bias={0: "never"}))[0]) == 1
    # A finite bias is added; ids past the vocabulary are ignored (llama.cpp).
    out = S.adjust_logits(torch.zeros(1, 3), SamplingParams(logit_bias={2: 1.5, 9: 3.0}))
    assert out.tolist() == [[0.0, 0.0, 1.5]]


def test_logit_bias_from_strings_and_through_json():
    encode = {"Hello": [4, 5], " world": [6, 5]}.__getitem__
    bias = S.logit_bias_from_strings({"Hello": -1.0, " world": -0.5}, encode)
    assert bias == {4: -1.0, 5: -1.5, 6: -0.5}  # shared tokens add up, as llama.cpp
    assert S.logit_bias_from_strings([("Hello", "never"), (" world", 2.0)], encode)[5] == "never"
    params = SamplingParams(temperature=0.7, logit_bias={3: "never", 4: 2.0}, dry_multiplier=0.5)
    saved = json.loads(json.dumps(params.as_dict()))
    assert saved == params.as_dict()  # JSON keeps it as it is (the store compares so)
    assert SamplingParams(**saved) == params and hash(SamplingParams(**saved)) == hash(params)
    assert saved["logit_bias"] == {"3": "never", "4": 2.0}
    assert set(saved) == {f.name for f in S.SamplingParams.__dataclass_fields__.values()}


# -- validation -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, bad",
    [
        ("typical_p", 0.0),
        ("typical_p", 1.5),
        ("xtc_probability", -0.1),
        ("xtc_probability", 1.1),
        ("xtc_threshold", 2.0),
        ("dry_multiplier", -1.0),
        ("dry_base", 0.5),
        ("dry_allowed_length", -1),
        ("dry_allowed_length", 1.5),
        ("dry_penalty_last_n", -2),
        ("dry_sequence_breakers", "\n"),
        ("mirostat", 1),
        ("mirostat_tau", -1.0),
        ("mirostat_eta", float("nan")),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3.0),
        ("penalty_last_n", -5),
        ("dynatemp_range", -0.1),
        ("dynatemp_exponent", -1.0),
        ("top_n_sigma", -1.5),
        ("logit_bias", {-1: 1.0}),
        ("logit_bias", {1: float("inf")}),
        ("logit_bias", {1: "sometimes"}),
    ],
)
def test_out_of_range_knobs_name_themselves(name, bad):
    with pytest.raises(InputError) as info:
        SamplingParams(**{name: bad})
    message = str(info.value)
    assert name in message and " must be " in message
    assert "\n" not in message.replace("\\n", "")  # one line ("\n" shows escaped)


# -- the chain's order ----------------------------------------------------------------------------
STAGES = {
    "temperature": lambda x, p, c: x / p.temperature,
    "top_k": lambda x, p, c: S.top_k_filter(x, p.top_k),
    "typical": lambda x, p, c: S.typical_filter(x, p.typical_p),
    "top_p": lambda x, p, c: S.top_p_filter(x, p.top_p),
    "min_p": lambda x, p, c: S.min_p_filter(x, p.min_p),
    "xtc": lambda x, p, c: S.xtc_filter(x, p.xtc_probability, p.xtc_threshold, c),
}
ORDER = ["temperature", "top_k", "typical", "top_p", "min_p", "xtc"]


def compose(logits, params, coins, order):
    x = logits.float()
    for name in order:
        x = STAGES[name](x, params, coins)
    return x


def test_the_chain_is_the_documented_order_and_order_matters():
    params = SamplingParams(
        temperature=0.7,
        top_k=8,
        typical_p=0.9,
        top_p=0.85,
        min_p=0.08,
        xtc_probability=1.0,
        xtc_threshold=0.08,
    )
    rand = torch.Generator().manual_seed(11)
    logits = torch.randn(400, 16, generator=rand) * 1.5
    coins = torch.zeros(400)
    chain = S.filter_logits(logits, params, coins)
    assert torch.equal(chain, compose(logits, params, coins, ORDER))
    # For each pair of neighbours (but temperature and top-k, which commute: top-k reads
    # the ranking only), the other order keeps other sets; llama.cpp's temperature-last too.
    pairs = {
        ("top_k", "typical"): dict(top_k=4, typical_p=0.5),
        ("typical", "top_p"): dict(typical_p=0.6, top_p=0.6),
        ("top_p", "min_p"): dict(top_p=0.7, min_p=0.3),
        ("min_p", "xtc"): dict(min_p=0.3, xtc_probability=1.0, xtc_threshold=0.1),
        ("temperature", "top_p"): dict(temperature=0.5, top_p=0.7),
    }
    for (first, second), knobs in pairs.items():
        params = SamplingParams(**knobs)
        ours = torch.isfinite(S.filter_logits(logits, params, coins))
        assert torch.equal(ours, torch.isfinite(compose(logits, params, coins, ORDER)))
        swapped = [second if n == first else first if n == second else n for n in ORDER]
        assert not torch.equal(ours, torch.isfinite(compose(logits, params, coins, swapped)))


def test_stages_one_to_three_and_dynatemp_in_order():
    x = torch.full((1, 4), 2.0)
    # Bias before the repetition penalty: (2 + 2) / 2, not 2 / 2 + 2.
    params = SamplingParams(logit_bias={1: 2.0}, repetition_penalty=2.0)
    assert S.adjust_logits(x, params, [[1]])[0, 1].item() == 2.0
    # The repetition penalty before DRY: 2 / 2 - 0.8, not (2 - 0.8) / 2.
    params = SamplingParams(repetition_penalty=2.0, **DRY, **NO_BREAKERS)
    out = S.adjust_logits(x, params, [[0, 1, 2, 0, 1]])  # "0 1" repeats: 2 would extend it
    assert out[0, 2].item() == pytest.approx(2.0 / 2 - 0.8)
    # Dynamic temperature after the truncation: its N is what top-k left.
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -2.0]])
    params = SamplingParams(top_k=2, dynatemp_range=0.5)
    before = S.apply_dynatemp(logits, 1.0, 0.5, 1.0)
    assert not torch.allclose(S.filter_logits(logits, params)[:, :2], before[:, :2])
    top2 = S.top_k_filter(logits, 2)
    assert torch.equal(S.filter_logits(logits, params), S.apply_dynatemp(top2, 1.0, 0.5, 1.0))


def test_greedy_is_the_argmax_after_stages_one_to_three_and_draws_nothing():
    params = SamplingParams(temperature=0, top_k=1, xtc_probability=1.0, xtc_threshold=0.01)
    logits = logits_of([0.5, 0.3, 0.2])
    gens = make_generators(1, 1)
    before = gens[0].get_state()
    assert int(sample(logits, params, gens)[0]) == 0  # XTC would have removed it
    assert torch.equal(gens[0].get_state(), before)
    params = SamplingParams(temperature=0, presence_penalty=1.0)
    assert int(sample(logits, params, gens, [[0]])[0]) == 1


# -- drafting, history -------------------------------------------------------------------------
def test_which_samplers_are_verifiable():
    ok = [
        SamplingParams(),
        SamplingParams(temperature=0, xtc_probability=1.0),  # greedy: no coin
        SamplingParams(typical_p=0.9, top_k=5, min_p=0.1, dynatemp_range=0.5),
        SamplingParams(repetition_penalty=1.2, presence_penalty=0.5, dry_multiplier=0.8),
        SamplingParams(logit_bias={1: "never"}, xtc_probability=1.0, xtc_threshold=0.6),
    ]
    assert all(p.verifiable for p in ok)
    assert not SamplingParams(mirostat=2).verifiable
    assert not SamplingParams(xtc_probability=0.1).verifiable
    assert SamplingParams(repetition_penalty=1.1).uses_history
    assert SamplingParams(dry_multiplier=0.5).uses_history
    assert not SamplingParams(repetition_penalty=1.1, penalty_last_n=0).uses_history
    assert not SamplingParams(dry_multiplier=0.5, dry_penalty_last_n=0).uses_history


# -- seeds per row, at any batch size, with every sampler on ------------------------------------------
EVERYTHING = SamplingParams(
    temperature=0.9,
    top_k=20,
    top_p=0.95,
    min_p=0.02,
    repetition_penalty=1.1,
    typical_p=0.95,
    xtc_probability=0.5,
    xtc_threshold=0.1,
    dry_multiplier=0.8,
    dry_allowed_length=1,
    presence_penalty=0.3,
    frequency_penalty=0.2,
    penalty_last_n=16,
    dynatemp_range=0.4,
    logit_bias={0: "never", 3: 1.0},
)
MIROSTAT = SamplingParams(
    temperature=0.9,
    mirostat=2,
    mirostat_tau=2.5,
    mirostat_eta=0.2,
    repetition_penalty=1.1,
    presence_penalty=0.3,
    dry_multiplier=0.8,
    logit_bias={0: "never"},
)


def fake_model(history: list[int], vocab: int = 24) -> torch.Tensor:
    """Deterministic logits for a prefix: a stand-in for the model."""
    seed = 17
    for token in history:
        seed = (seed * 1_000_003 + token + 1) % (2**31 - 1)
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * 2.5


def generate(params, rows, seed, device="cpu", steps=24):
    breakers = DryBreakers.from_sequences([[7]])
    gens = make_generators(seed, rows)
    state = SamplerState.start(params, rows, device, dry_breakers=breakers)
    paths = [[1, 2, 3, 4, 5, 1, 2, 3] for _ in range(rows)]  # typed text
    for _ in range(steps):
        logits = torch.stack([fake_model(p) for p in paths]).to(device)
        history = torch.tensor(paths, device=device)
        chosen, state = sample_step(logits, params, gens, history, state)
        assert chosen.device.type == torch.device(device).type
        if state.mu is not None:
            assert state.mu.device.type == torch.device(device).type
        for path, token in zip(paths, chosen.tolist()):
            path.append(token)
    return [p[8:] for p in paths]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("params", [EVERYTHING, MIROSTAT], ids=["chain", "mirostat"])
def test_a_seed_reproduces_each_row_at_any_batch_size(params, device):
    one, three, five = (generate(params, rows, 42, device) for rows in (1, 3, 5))
    assert one[0] == three[0] == five[0]
    assert three == five[:3]
    assert len({tuple(row) for row in five}) == 5  # rows differ: their own streams
    assert generate(params, 1, 43, device)[0] != one[0]
    assert all(0 not in row for row in five)  # "never"


def test_sample_step_matches_sample_when_stateless():
    rand = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 30, generator=rand)
    params = SamplingParams(temperature=0.8, xtc_probability=0.5, typical_p=0.9)
    a = sample(logits, params, make_generators(9, 3))
    b, _ = sample_step(logits, params, make_generators(9, 3))
    assert torch.equal(a, b)


@pytest.mark.parametrize("params", [EVERYTHING, MIROSTAT], ids=["chain", "mirostat"])
def test_drafted_walk_with_sample_step_is_plain_decoding_seed_for_seed(params):
    """The contract for the decode loops: choosing each emitted token with one
    ``sample_step`` call, in order, on the verified row for the true prefix (as
    ``decode.draft_tree.accept_walk`` does), keeps a seed's text -- even for XTC and mirostat."""
    from loomterm.engine.decode.draft_tree import DraftTree, accept_walk

    breakers = DryBreakers.from_sequences([[7]])
    prompt = [1, 2, 3, 4, 5, 1, 2, 3]
    plain = generate(params, 1, 5, steps=30)[0]

    gens = make_generators(5, 1)
    state = SamplerState.start(params, 1, dry_breakers=breakers)
    path = list(prompt)
    guesses = torch.Generator().manual_seed(0)
    accepted = 0
    while len(path) - len(prompt) < 30:
        # Drafts: the true continuation, sometimes spoiled, plus a wrong branch.
        done = len(path) - len(prompt)
        tree = DraftTree(path[-1], 16)
        draft = list(plain[done : done + 4])
        if torch.rand(1, generator=guesses) < 0.5 and draft:
            draft[-1] = (draft[-1] + 1) % 24
        tree.add_sequence(draft, 4)
        tree.add_sequence([(t + 3) % 24 for t in draft[:2]], 4)
        # The verified rows come from one "forward" over the tree, before any choice.
        prefixes = []
        for node in range(len(tree)):
            tokens, at = [], node
            while at > 0:
                tokens.append(tree.tokens[at])
                at = tree.parents[at]
            prefixes.append(path + tokens[::-1])
        rows = torch.stack([fake_model(p) for p in prefixes])

        def choose(i, rows=rows, prefixes=prefixes):
            nonlocal state
            token, state = sample_step(rows[i][None], params, gens, [prefixes[i]], state)
            return int(token[0])

        def stop(token, count, done=done):
            return done + count >= 30

        walk = accept_walk(tree, choose, stop)
        path += [token for _, token, _ in walk]
        accepted += sum(node is not None for _, _, node in walk)
    assert path[len(prompt) :] == plain
    assert 0 < accepted < 30  # drafts were both taken and refused
