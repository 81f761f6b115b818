"""Stages 5-10 (``engine/sample/truncation.py``) at the edges the mutation run found untested:
dynamic temperature strictly between 0 and 1, the argmax kept when a temperature comes
out 0 or mirostat's bound is below every surprise (when the best token is not the
first), each filter's boundary. Definitions are llama.cpp's (``temp_ext``,
``mirostat-v2``, ``top-n-sigma``, ``top-k``, ``typical``, ``top-p``, ``min-p``, ``xtc``)."""

from __future__ import annotations

import math

import pytest
import torch

from loomterm.engine.sample import truncation as T


def logits_of(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs], dtype=torch.float64).log().float()


def kept(logits: torch.Tensor, row: int = 0) -> set[int]:
    return set(torch.isfinite(logits[row]).nonzero().flatten().tolist())


def entropy_ratio(probs: list[float]) -> float:
    p = torch.tensor(probs, dtype=torch.float64)
    return float(-(p * p.log()).sum() / math.log(len(probs)))


def test_a_dynamic_temperature_below_one_scales_the_logits():
    probs = [0.1, 0.2, 0.7]
    logits = logits_of(probs)
    temp = 0.2 + (0.8 - 0.2) * entropy_ratio(probs)  # T 0.5, range 0.3
    assert 0 < temp < 1
    out = T.apply_dynatemp(logits, 0.5, 0.3, 1.0)
    assert torch.allclose(out, logits / temp, rtol=1e-5)
    assert T.dynatemp_temperatures(logits, 0.5, 0.3, 1.0).item() == pytest.approx(temp, rel=1e-5)


def test_a_dynamic_temperature_of_zero_keeps_the_argmax_wherever_it_is():
    logits = logits_of([0.05, 0.05, 0.9]) * 1e3  # entropy ~0: temperature max(0, T - r)
    rows = torch.cat([logits, logits_of([0.3, 0.3, 0.4])])  # row 1: a positive temperature
    out = T.apply_dynatemp(rows, 0.2, 0.5, 1.0)
    assert kept(out, 0) == {2} and out[0, 2] == rows[0, 2]
    assert kept(out, 1) == {0, 1, 2}


def test_mirostat_keeps_the_best_token_wherever_it_is():
    logits = logits_of([0.2, 0.1, 0.7])  # surprises 2.3, 3.3, 0.5 bits
    assert kept(T.mirostat_v2_filter(logits, torch.tensor([0.1]))) == {2}
    assert kept(T.mirostat_v2_filter(logits, torch.tensor([2.5]))) == {0, 2}
    two = torch.cat([logits, logits_of([0.6, 0.3, 0.1])])
    out = T.mirostat_v2_filter(two, torch.tensor([0.1, 1.8]))
    assert kept(out, 0) == {2} and kept(out, 1) == {0, 1}


def test_top_k_keeps_k_and_ties_at_the_kth():
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    assert kept(T.top_k_filter(logits, 1)) == {1}
    assert kept(T.top_k_filter(logits, 2)) == {1, 2, 3}  # a tie at the k-th stays
    assert T.top_k_filter(logits, 5) is logits and T.top_k_filter(logits, 0) is logits
    assert kept(T.top_k_filter(logits, 4)) == {0, 1, 2, 3}


def test_top_p_keeps_through_the_token_that_reaches_p():
    logits = logits_of([0.5, 0.25, 0.125, 0.125])
    assert kept(T.top_p_filter(logits, 0.5)) == {0}  # 0.5 reaches 0.5: stop there
    assert kept(T.top_p_filter(logits, 0.5001)) == {0, 1}
    assert kept(T.top_p_filter(logits, 0.75)) == {0, 1}
    assert kept(T.top_p_filter(logits, 0.1)) == {0}  # the best always stays
    assert T.top_p_filter(logits, 1.0) is logits


def test_min_p_is_relative_to_the_rows_best():
    logits = torch.cat([logits_of([0.5, 0.25, 0.125, 0.125]), logits_of([0.25] * 4)])
    out = T.min_p_filter(logits, 0.5)
    assert kept(out, 0) == {0, 1} and kept(out, 1) == {0, 1, 2, 3}  # 0.25 >= 0.5 * 0.5 stays
    assert T.min_p_filter(logits, 0.0) is logits


def test_typical_keeps_through_the_token_that_exceeds_p():
    # H = 1.238 nats; |-log p - H| = 0.544, 0.372, 0.660, 0.660: token 1 is the most
    # typical, then 0, then 2 and 3 (a tie, kept in index order).
    probs = [0.5, 0.2, 0.15, 0.15]
    logits = logits_of(probs)
    assert kept(T.typical_filter(logits, 0.19)) == {1}  # 0.2 > 0.19
    assert kept(T.typical_filter(logits, 0.21)) == {0, 1}
    assert kept(T.typical_filter(logits, 0.69)) == {0, 1}
    assert kept(T.typical_filter(logits, 0.71)) == {0, 1, 2}
    assert kept(T.typical_filter(logits, 0.86)) == {0, 1, 2, 3}
    assert T.typical_filter(logits, 1.0) is logits


def test_xtc_on_its_coin_removes_all_but_the_least_likely_above_the_threshold():
    logits = torch.cat([logits_of([0.4, 0.3, 0.2, 0.1])] * 3)
    coins = torch.tensor([0.5, 0.51, 0.0])
    out = T.xtc_filter(logits, 0.5, 0.2, coins)  # coin <= probability acts
    assert kept(out, 0) == {2, 3} and kept(out, 1) == {0, 1, 2, 3} and kept(out, 2) == {2, 3}
    assert T.xtc_filter(logits, 0.0, 0.2, coins) is logits
    assert T.xtc_filter(logits, 1.0, 0.51, coins) is logits  # above 0.5: never acts
    edge = T.xtc_filter(logits, 1.0, 0.5, torch.zeros(3))  # nothing reaches 0.5
    assert kept(edge, 0) == {0, 1, 2, 3}


def test_xtc_at_a_threshold_of_one_half_still_acts_on_an_exact_tie():
    """llama.cpp returns only for a threshold *above* 0.5: at 0.5, two tokens of p = 0.5
    are both top choices, and the first (in order) goes."""
    logits = torch.zeros(1, 2)  # p = 0.5 each, exactly
    assert kept(T.xtc_filter(logits, 1.0, 0.5, torch.zeros(1))) == {1}


def test_typical_keeps_a_token_whose_mass_before_is_exactly_p():
    """llama.cpp stops once the running sum *exceeds* p: at exactly p it goes on."""
    logits = torch.zeros(1, 2)  # p = 0.5 each, exactly
    assert kept(T.typical_filter(logits, 0.5)) == {0, 1}


def test_top_n_sigma_keeps_a_logit_exactly_n_deviations_below_the_best():
    """llama.cpp removes a logit *below* ``max - n * std``: at exactly that, it stays.
    [-1, 1]: mean 0, population std 1, so at n = 2 the floor is -1 exactly."""
    logits = torch.tensor([[-1.0, 1.0]])
    assert kept(T.top_n_sigma_filter(logits, 2.0)) == {0, 1}
    assert kept(T.top_n_sigma_filter(logits, 1.99)) == {1}


def test_top_n_sigma_uses_the_population_deviation_of_the_candidates_left():
    """[0, 0, 3]: population std sqrt(2) puts the floor at 3 - 2 sqrt(2) > 0 for n = 2
    (the sample std, sqrt(3), would keep the zeros). A removed token (-inf) counts
    neither in the mean nor in the deviation: [-1, 1, -inf] is [-1, 1]."""
    assert kept(T.top_n_sigma_filter(torch.tensor([[0.0, 0.0, 3.0]]), 2.0)) == {2}
    gone = torch.tensor([[-1.0, 1.0, float("-inf")], [float("-inf")] * 3])
    out = T.top_n_sigma_filter(gone, 2.0)
    assert kept(out, 0) == {0, 1}
    assert kept(out, 1) == set()  # a row with nothing left stays as it is
    assert not torch.isnan(out).any()


def test_top_n_sigma_keeps_the_best_wherever_it_is_and_zero_is_off():
    logits = torch.tensor([[0.0, 5.0, 0.1, 0.2], [9.0, 0.0, 0.0, 0.0]])
    assert kept(T.top_n_sigma_filter(logits, 0.01), 0) == {1}
    assert kept(T.top_n_sigma_filter(logits, 0.01), 1) == {0}
    assert T.top_n_sigma_filter(logits, 0.0) is logits
    assert T.top_n_sigma_filter(logits, -1.0) is logits
