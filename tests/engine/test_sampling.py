"""Sampling against its definitions, on small distributions worked out by hand.

Each warper is checked on its own (which tokens it keeps, at the boundary, and the
renormalised probabilities), then in the documented order (penalty, temperature,
top-k, top-p, min-p) on cases where another order keeps a different set. Draws are
checked with Pearson's chi-square on fixed seeds, so the tests are deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from loomterm.engine.sample.chain import (
    TOP_ALTERNATIVES,
    SamplingParams,
    apply_repetition_penalty,
    draw,
    filter_logits,
    make_generators,
    sample,
    sampling_probs,
    token_records,
)
from loomterm.errors import InputError


def logits_of(*probs: float) -> torch.Tensor:
    """(1, V) logits whose softmax is ``probs`` (zero probability: -inf)."""
    return torch.tensor([[math.log(p) if p > 0 else float("-inf") for p in probs]])


def kept(probs: torch.Tensor) -> list[set[int]]:
    """Per row, the tokens left with a non-zero probability."""
    return [set(row.nonzero().flatten().tolist()) for row in probs]


def renormalised(probs: list[float], keep: set[int]) -> torch.Tensor:
    """The definition: probabilities of ``keep`` divided by their total, others zero."""
    total = sum(probs[i] for i in keep)
    return torch.tensor([probs[i] / total if i in keep else 0.0 for i in range(len(probs))])


def probs_for(logits: torch.Tensor, history=None, **params) -> torch.Tensor:
    return sampling_probs(logits, SamplingParams(**params), history)


# -- the parameters ------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("temperature", -0.5, "temperature must be a number >= 0 (got -0.5)"),
        ("top_p", 0.0, "top_p must be a number in (0, 1] (got 0.0)"),
        ("top_p", 1.5, "top_p must be a number in (0, 1] (got 1.5)"),
        ("top_k", -1, "top_k must be a whole number >= 0 (got -1)"),
        ("min_p", -0.1, "min_p must be a number in [0, 1) (got -0.1)"),
        ("min_p", 1.0, "min_p must be a number in [0, 1) (got 1.0)"),
        ("repetition_penalty", 0.0, "repetition_penalty must be a number > 0 (got 0.0)"),
    ],
)
def test_out_of_range_parameters_are_refused_with_their_range(field, value, message):
    with pytest.raises(InputError) as info:
        SamplingParams(**{field: value})
    assert str(info.value) == message


def test_the_edges_of_each_range_are_accepted():
    for edge in (
        {"temperature": 0.0},
        {"top_p": 1.0},
        {"top_p": 1e-9},
        {"top_k": 0},
        {"min_p": 0.0},
        {"min_p": 0.999},
        {"repetition_penalty": 1e-9},
    ):
        SamplingParams(**edge)


def test_defaults_change_nothing_and_round_trip_as_a_dict():
    params = SamplingParams()
    stored = params.as_dict()
    assert {k: stored[k] for k in ("temperature", "top_p", "top_k", "min_p")} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
    }
    assert stored["repetition_penalty"] == 1.0 and stored["logit_bias"] == {}
    assert SamplingParams(**stored) == params
    assert not params.greedy and SamplingParams(temperature=0).greedy
    assert not SamplingParams(temperature=1e-3).greedy
    probs = [0.5, 0.2, 0.15, 0.1, 0.05]
    torch.testing.assert_close(probs_for(logits_of(*probs))[0], torch.tensor(probs))


# -- repetition penalty ----------------------------------------------------------------
def test_repetition_penalty_follows_ctrl():
    """CTRL (Keskar et al. 2019), as transformers and llama.cpp apply it: a seen
    token's positive logit is divided by the penalty, a negative one multiplied, so
    either way it becomes less likely; unseen tokens keep theirs."""
    logits = torch.tensor([[2.0, -1.0, 0.0, 3.0, -4.0]])
    history = torch.tensor([[0, 1, 2]])
    out = apply_repetition_penalty(logits, history, 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.0, 3.0, -4.0]]
    assert logits.tolist() == [[2.0, -1.0, 0.0, 3.0, -4.0]]  # the input is left alone
    # A penalty below 1 rewards repeats, by the same rule.
    assert apply_repetition_penalty(logits, history, 0.5).tolist() == [[4.0, -0.5, 0.0, 3.0, -4.0]]


def test_repetition_penalty_counts_a_token_once_and_works_per_row():
    logits = torch.tensor([[4.0, 1.0, -1.0], [4.0, 1.0, -1.0]])
    history = torch.tensor([[0, 0, 0], [2, 1, 2]])  # (B, T): repeats do not compound
    out = apply_repetition_penalty(logits, history, 2.0)
    assert out.tolist() == [[2.0, 1.0, -1.0], [4.0, 0.5, -2.0]]
    one = apply_repetition_penalty(logits[:1], torch.tensor([[1]]), 2.0)  # a single token
    assert one.tolist() == [[4.0, 0.5, -1.0]]


def test_no_penalty_without_history_or_at_one():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    assert apply_repetition_penalty(logits, torch.tensor([[0, 1]]), 1.0).tolist() == [
        [2.0, -1.0, 0.5]
    ]
    empty = torch.zeros((1, 0), dtype=torch.long)
    assert apply_repetition_penalty(logits, empty, 3.0).tolist() == [[2.0, -1.0, 0.5]]


def test_sampling_probs_applies_the_penalty_from_history():
    logits = torch.tensor([[math.log(4.0), 0.0]])  # 0.8, 0.2
    history = torch.tensor([[0]])
    got = probs_for(logits, history, repetition_penalty=2.0)[0]  # logit log 4 -> log 2
    torch.testing.assert_close(got, torch.tensor([2 / 3, 1 / 3]))
    torch.testing.assert_close(
        probs_for(logits, None, repetition_penalty=2.0)[0], got.new([0.8, 0.2])
    )


def test_sampled_draws_apply_the_repetition_penalty():
    """Not only greedy: a sampled token sees the penalty too."""
    logits = torch.tensor([[5.0, 0.0]])  # p(1) = 0.0067; penalised, 5.0 -> 0.05: p(1) = 0.49
    rows = 400
    params = SamplingParams(temperature=1.0, repetition_penalty=100.0)
    history = torch.zeros(rows, 1, dtype=torch.long)  # token 0 was seen in every row
    picks = sample(logits.expand(rows, -1), params, make_generators(3, rows), history)
    stat, dof = chi_square(
        torch.bincount(picks, minlength=2), sampling_probs(logits, params, history[:1])[0]
    )
    assert stat < bound(dof)
    assert 150 < int((picks == 1).sum()) < 250
    plain = sample(logits.expand(rows, -1), params, make_generators(3, rows))
    assert int((plain == 1).sum()) < 15


# -- temperature and greedy ------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.25, 0.5, 1.0, 2.0, 7.0])
def test_temperature_divides_the_logits(temperature):
    logits = torch.tensor([[1.5, -0.5, 0.25, 3.0], [0.0, 0.1, -2.0, 1.0]])
    params = SamplingParams(temperature=temperature)
    torch.testing.assert_close(filter_logits(logits, params), logits / temperature)
    # p_i is proportional to p_i(T=1) ** (1 / T).
    base = logits.softmax(-1)
    want = base ** (1 / temperature)
    torch.testing.assert_close(sampling_probs(logits, params), want / want.sum(-1, keepdim=True))


def test_filtering_works_in_float32_whatever_the_logits_dtype():
    logits = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.bfloat16)
    out = filter_logits(logits, SamplingParams(top_k=2))
    assert out.dtype == torch.float32
    assert sampling_probs(logits, SamplingParams()).dtype == torch.float32


def test_greedy_is_the_argmax_and_ignores_the_filters_and_the_seed():
    logits = torch.tensor([[0.1, 2.0, 1.9, -1.0], [3.0, 0.0, 2.5, 2.9]])
    params = SamplingParams(temperature=0, top_k=1, top_p=0.1, min_p=0.9)
    assert sample(logits, params).tolist() == [1, 0]
    assert sample(logits, params, make_generators(5, 2)).tolist() == [1, 0]
    assert sampling_probs(logits, params).tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    assert sampling_probs(logits, params).dtype == torch.float32


def test_greedy_probabilities_are_float32_whatever_the_logits_dtype():
    logits = torch.tensor([[0.5, 2.0, 1.0]], dtype=torch.bfloat16)
    probs = sampling_probs(logits, SamplingParams(temperature=0))
    assert probs.dtype == torch.float32 and probs.tolist() == [[0.0, 1.0, 0.0]]


def test_greedy_applies_the_repetition_penalty():
    logits = torch.tensor([[3.0, 2.0, -1.0]])
    history = torch.tensor([[0]])
    params = SamplingParams(temperature=0, repetition_penalty=2.0)  # 3.0 -> 1.5
    assert sample(logits, params, history=history).tolist() == [1]
    assert sampling_probs(logits, params, history).tolist() == [[0, 1, 0]]
    assert sample(logits, params).tolist() == [0]  # no history: no penalty


# -- top-k -------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_top_k_keeps_exactly_the_k_largest(k):
    probs = [0.1, 0.4, 0.05, 0.25, 0.2]  # ranks: 1, 3, 4, 0, 2
    order = [1, 3, 4, 0, 2]
    got = probs_for(logits_of(*probs), top_k=k)
    assert kept(got) == [set(order[:k])]
    torch.testing.assert_close(got[0], renormalised(probs, set(order[:k])))


def test_top_k_keeps_every_token_tied_with_the_kth():
    """Ties at the k-th value are all kept (as transformers' TopKLogitsWarper does),
    so the kept set never depends on the order of equal logits."""
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0, 2.0]])
    assert kept(probs_for(logits, top_k=2)) == [{0, 2, 4}]
    assert kept(probs_for(logits, top_k=3)) == [{0, 2, 4}]
    assert kept(probs_for(logits, top_k=4)) == [{0, 1, 2, 4}]


def test_top_k_of_zero_or_the_vocabulary_keeps_everything():
    probs = [0.1, 0.4, 0.05, 0.25, 0.2]
    for k in (0, 5, 50):
        torch.testing.assert_close(probs_for(logits_of(*probs), top_k=k)[0], torch.tensor(probs))


def test_top_k_works_per_row():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
    assert kept(probs_for(logits, top_k=2)) == [{2, 3}, {0, 1}]


# -- top-p -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "p, want",
    [
        (0.01, {1}),  # the best token always stays
        (0.39, {1}),
        (0.45, {1, 3}),  # 0.4 < 0.45: the token that crosses p is kept
        (0.64, {1, 3}),
        (0.7, {1, 3, 4}),
        (0.84, {1, 3, 4}),
        (0.9, {1, 3, 4, 0}),
        (0.96, {1, 3, 4, 0, 2}),
        (1.0, {1, 3, 4, 0, 2}),
    ],
)
def test_top_p_keeps_the_smallest_prefix_that_reaches_p(p, want):
    # Sorted: 0.4, 0.25, 0.2, 0.1, 0.05; cumulative 0.4, 0.65, 0.85, 0.95, 1 (p is kept
    # off those sums here: they are not exact in float32; see the next test).
    probs = [0.1, 0.4, 0.05, 0.25, 0.2]
    got = probs_for(logits_of(*probs), top_p=p)
    assert kept(got) == [want]
    torch.testing.assert_close(got[0], renormalised(probs, want))


def test_top_p_stops_when_the_mass_equals_p_exactly():
    """Four equal logits give exactly 0.25 each (and exact cumulative sums): two tokens
    reach 0.5, so a third is not needed."""
    logits = torch.zeros(1, 4)
    got = probs_for(logits, top_p=0.5)
    assert len(kept(got)[0]) == 2
    assert sorted(got[0].tolist()) == [0.0, 0.0, 0.5, 0.5]
    assert len(kept(probs_for(logits, top_p=0.75))[0]) == 3
    assert len(kept(probs_for(logits, top_p=0.7500001))[0]) == 4


def test_top_p_of_one_keeps_even_negligible_tokens():
    """At top_p = 1 the mass before a tiny token already rounds to 1.0 in float32; it
    must stay all the same (no filtering at all)."""
    logits = torch.tensor([[0.0, -30.0, -40.0]])
    assert kept(probs_for(logits, top_p=1.0)) == [{0, 1, 2}]


def test_top_p_works_per_row_in_the_original_token_order():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.15, 0.35]]))
    assert kept(probs_for(logits, top_p=0.8)) == [{1, 2}, {0, 2}]


# -- min-p -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "min_p, want",
    [
        (0.0, {0, 1, 2, 3, 4}),
        (0.2, {1, 3, 4, 0}),  # floor 0.08
        (0.3, {1, 3, 4}),  # floor 0.12
        (0.45, {1, 3, 4}),  # floor 0.18
        (0.55, {1, 3}),  # floor 0.22
        (0.62, {1, 3}),  # floor 0.248
        (0.7, {1}),  # floor 0.28
    ],
)
def test_min_p_keeps_tokens_at_least_min_p_times_the_best(min_p, want):
    probs = [0.1, 0.4, 0.05, 0.25, 0.2]
    got = probs_for(logits_of(*probs), min_p=min_p)
    assert kept(got) == [want]
    torch.testing.assert_close(got[0], renormalised(probs, want))


def test_min_p_keeps_a_token_exactly_at_the_floor():
    logits = torch.tensor([[0.0, -math.log(2.0), -3.0]])
    probs = logits.softmax(-1)[0]
    assert probs[1] == 0.5 * probs[0]  # exact in float32: exp(-ln 2) rounds to 0.5
    assert kept(probs_for(logits, min_p=0.5)) == [{0, 1}]
    assert kept(probs_for(logits, min_p=0.5000001)) == [{0}]


def test_min_p_floor_is_per_row():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]))
    # Each row's own best sets its floor (0.25 and 0.4), not the batch's best (0.8).
    assert kept(probs_for(logits, min_p=0.5)) == [{0, 1}, {2}]


# -- the order they apply in -------------------------------------------------------------
def test_penalty_comes_before_the_filters():
    logits = torch.tensor([[3.0, 2.5, 0.0]])
    history = torch.tensor([[0]])  # 3.0 -> 1.5: token 1 is now the best
    assert kept(probs_for(logits, history, top_k=1, repetition_penalty=2.0)) == [{1}]
    # The other way round top-k would keep token 0 alone.
    assert kept(probs_for(logits, None, top_k=1)) == [{0}]


def test_temperature_comes_before_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0]])  # at T=1: 0.665, 0.245, 0.090
    assert kept(probs_for(logits, top_p=0.7)) == [{0, 1}]
    # At T=0.5 the best holds 0.867 >= 0.7 alone. Filtering first would keep {0, 1}.
    got = probs_for(logits, temperature=0.5, top_p=0.7)
    assert kept(got) == [{0}]


def test_temperature_comes_before_min_p():
    logits = torch.tensor([[0.0, -1.0]])  # the ratio is e^-1 = 0.37 at T=1, e^-0.5 at T=2
    assert kept(probs_for(logits, min_p=0.5)) == [{0}]
    got = probs_for(logits, temperature=2.0, min_p=0.5)
    assert kept(got) == [{0, 1}]
    torch.testing.assert_close(got, (logits / 2).softmax(-1))


def test_top_k_comes_before_top_p():
    """top-p works on the distribution that top-k renormalised."""
    probs = [0.4, 0.3, 0.3 - 1e-3, 1e-3]
    # top-k=2 leaves 0.4/0.7 = 0.571 >= 0.5: token 0 alone reaches p. On the raw
    # distribution 0.4 < 0.5, so top-p first would keep tokens 0 and 1.
    assert kept(probs_for(logits_of(*probs), top_k=2, top_p=0.5)) == [{0}]
    assert kept(probs_for(logits_of(*probs), top_p=0.5)) == [{0, 1}]


def test_top_p_comes_before_min_p():
    """min-p keeps its ratio to the best, whatever top-p removed; top-p sees the
    distribution before min-p's cut (after it, the masses would be larger)."""
    probs = [0.4, 0.3, 0.2, 0.1]
    # top-p 0.75 keeps {0, 1, 2} (0.4 + 0.3 < 0.75); min-p 0.3 then keeps those >= 0.12.
    got = probs_for(logits_of(*probs), top_p=0.75, min_p=0.3)
    assert kept(got) == [{0, 1, 2}]
    torch.testing.assert_close(got[0], renormalised(probs, {0, 1, 2}))
    # min-p first would leave 0.444, 0.333, 0.222: 0.778 >= 0.75 with two tokens.
    cut = probs_for(logits_of(*probs), min_p=0.3)
    assert kept(probs_for(cut.log(), top_p=0.75)) == [{0, 1}]


def test_all_filters_together():
    probs = [0.3, 0.25, 0.2, 0.15, 0.06, 0.04]
    # top-k 5 drops 0.04 -> (0.3, 0.25, 0.2, 0.15, 0.06) / 0.96; top-p 0.8 needs
    # 0.3 + 0.25 + 0.2 = 0.75 / 0.96 = 0.78 < 0.8, so 0.15 crosses and stays;
    # min-p 0.55 keeps >= 0.165 of the original scale: drops 0.15.
    got = probs_for(logits_of(*probs), top_k=5, top_p=0.8, min_p=0.55)
    assert kept(got) == [{0, 1, 2}]
    torch.testing.assert_close(got[0], renormalised(probs, {0, 1, 2}))


# -- draws -------------------------------------------------------------------------------
def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic over the outcomes with non-zero probability."""
    total = float(counts.sum())
    cells = probs > 0
    want = probs[cells] * total
    stat = float(((counts[cells].float() - want) ** 2 / want).sum())
    return stat, int(cells.sum()) - 1


def bound(dof: int) -> float:
    """About the 0.9999 quantile of chi-square: a loose bound, the seeds are fixed."""
    return dof + 4.0 * math.sqrt(2 * dof) + 10


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 3},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 1.0, "min_p": 0.2},
    ],
)
def test_draws_follow_the_filtered_distribution(params):
    logits = logits_of(0.1, 0.4, 0.05, 0.25, 0.15, 0.05)
    settings = SamplingParams(**params)
    probs = sampling_probs(logits, settings)[0]
    rows = 4000
    picks = sample(logits.expand(rows, -1), settings, make_generators(11, rows))
    counts = torch.bincount(picks, minlength=probs.numel())
    assert counts[probs == 0].sum() == 0  # filtered tokens are never drawn
    stat, dof = chi_square(counts, probs)
    assert stat < bound(dof), (stat, dof, counts.tolist())


def test_draws_without_generators_use_the_global_generator():
    probs = torch.tensor([[0.0, 0.7, 0.3], [0.5, 0.0, 0.5]])
    with torch.random.fork_rng():
        torch.manual_seed(3)
        first = [draw(probs, None).tolist() for _ in range(50)]
        torch.manual_seed(3)
        again = [draw(probs, None).tolist() for _ in range(50)]
    assert first == again
    assert all(a in (1, 2) and b in (0, 2) for a, b in first)
    counts = torch.bincount(torch.tensor([a for a, _ in first]), minlength=3)
    assert counts[1] > counts[2] > 0


def test_draw_returns_one_token_per_row():
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    for generators in (None, make_generators(0, 3)):
        got = draw(probs, generators)
        assert got.tolist() == [1, 2, 0] and got.dtype == torch.long and got.shape == (3,)
        assert got.device == probs.device


def test_a_seed_gives_each_row_the_same_tokens_whatever_the_batch_size():
    logits = torch.zeros(1, 50)  # uniform: every draw is informative
    params = SamplingParams(temperature=1.0)

    def rows_drawn(seed: int, batch: int, steps: int = 12) -> list[list[int]]:
        generators = make_generators(seed, batch)
        picks = [sample(logits.expand(batch, -1), params, generators) for _ in range(steps)]
        return torch.stack(picks, dim=1).tolist()  # (batch, steps)

    one, three, five = rows_drawn(7, 1), rows_drawn(7, 3), rows_drawn(7, 5)
    assert one[0] == three[0] == five[0]
    assert three == five[:3]
    assert len({tuple(r) for r in five}) == 5  # the rows are independent streams
    assert rows_drawn(8, 1) != one  # and another seed gives another text
    assert rows_drawn(7, 3) == three  # reproducible


def test_the_seed_of_each_row_is_stable():
    """Saved sessions record the seed: row ``i`` of seed ``s`` must keep drawing from
    the same stream in later versions, so the seeding rule is pinned."""
    assert make_generators(None, 3) is None
    generators = make_generators(5, 3)
    assert [g.initial_seed() for g in generators] == [5_000_015, 5_000_016, 5_000_017]
    assert make_generators(0, 1)[0].initial_seed() == 0
    assert all(g.device == torch.device("cpu") for g in generators)


# -- records -------------------------------------------------------------------------------
def test_token_records_are_raw_log_probabilities_best_first():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, 0.0, 5.0, 1.0]])
    chosen = torch.tensor([2, 3])
    mine, alts = token_records(logits, chosen, k=3)
    logprobs = logits.log_softmax(-1)
    # logsumexp on the device vs a full log-softmax: float32 rounding apart.
    assert mine == pytest.approx([float(logprobs[0, 2]), float(logprobs[1, 3])], abs=1e-6)
    assert [[t for t, _ in row] for row in alts] == [[1, 2, 0], [2, 3, 0]]
    for row, found in enumerate(alts):
        assert [lp for _, lp in found] == pytest.approx(
            sorted(logprobs[row].tolist(), reverse=True)[:3], abs=1e-6
        )
        assert all(isinstance(t, int) for t, _ in found)


def test_token_records_keep_at_most_the_vocabulary():
    logits = torch.randn(2, 30, generator=torch.Generator().manual_seed(0))
    mine, alts = token_records(logits, torch.tensor([0, 1]))
    assert len(mine) == 2 and [len(a) for a in alts] == [TOP_ALTERNATIVES] * 2
    _, small = token_records(logits[:, :4], torch.tensor([0, 1]), k=10)
    assert [len(a) for a in small] == [4, 4]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_draws_come_back_on_the_logits_device():
    """Draws happen on the CPU (the same token on any device); the token goes back."""
    probs = torch.tensor([[0.0, 1.0, 0.0]], device="cuda")
    for generators in (None, make_generators(1, 1)):
        got = draw(probs, generators)
        assert got.device == probs.device and got.tolist() == [1]
