"""The drafting ledger (``engine/decode/draft_ledger.py``): whether drafting pays, from
the measured seconds and tokens of plain and drafted steps; its probe schedule; the
calibration of the static cost model. Timings are given, so each decision is exact."""

from __future__ import annotations

import pytest

from loomterm.engine.decode.draft_ledger import MAX_PROBE_GAP, PLAIN_EVERY, PROBE_BURST, Ledger
from loomterm.engine.decode.draft_tree import Cost

PLAIN = 0.010  # seconds of a plain step


def learnt(tokens: int, seconds: float, steps: int = 6) -> Ledger:
    """A ledger past its warm-up: plain steps of PLAIN, then ``steps`` drafted steps of
    3 drafts each, each emitting ``tokens`` in ``seconds``."""
    ledger = Ledger()
    for _ in range(5):
        ledger.record(0, 1, PLAIN)
    for _ in range(steps):
        ledger.record(3, tokens, seconds)
    return ledger


def test_drafting_pays_when_a_pass_yields_more_than_its_cost_in_plain_steps():
    # A pass costs 1.3 plain steps: 2 tokens pays, 1 token does not, 1.3 is break-even.
    assert learnt(2, 1.3 * PLAIN).pays
    assert not learnt(1, 1.3 * PLAIN).pays
    assert learnt(1, 0.99 * PLAIN).pays  # a pass cheaper than a plain step (a GPU)
    assert learnt(2, 1.3 * PLAIN).cost_ratio == pytest.approx(1.3)
    assert learnt(2, 1.3 * PLAIN).yield_per_pass == pytest.approx(2.0)
    # Three tokens a pass do not pay for a pass of 3.5 plain steps.
    assert not learnt(3, 3.5 * PLAIN).pays


def test_it_drafts_to_learn_until_warm_and_until_a_plain_step_is_timed():
    ledger = Ledger(warmup=4)
    for _ in range(3):
        ledger.record(3, 1, 5 * PLAIN)  # losing badly, but only three steps
        assert ledger.pays
    ledger.record(3, 1, 5 * PLAIN)
    assert ledger.pays and ledger.cost_ratio is None  # no plain step timed yet
    assert ledger.wants_plain  # so the next step is a plain one
    ledger.record(0, 1, PLAIN)
    assert not ledger.pays and not ledger.wants_plain


def test_a_window_of_losing_passes_turns_it_off_and_old_passes_fade():
    ledger = learnt(2, 1.5 * PLAIN)
    for _ in range(2):
        ledger.record(3, 1, 1.5 * PLAIN)
        assert ledger.pays  # a miss or two after a run of passes that paid
    ledger.record(3, 1, 1.5 * PLAIN)
    assert not ledger.pays  # a third outweighs them
    for _ in range(3):
        ledger.record(3, 3, 1.5 * PLAIN)
    assert ledger.pays


def test_the_plain_time_is_a_median_a_busy_moment_does_not_move_it():
    ledger = learnt(2, 1.3 * PLAIN)
    ledger.record(0, 1, 50 * PLAIN)  # one step stalled by another process
    assert ledger.plain == pytest.approx(PLAIN)
    assert ledger.pays


def test_a_new_generation_caps_the_credit_of_a_replay():
    """A greedy replay accepts 20 tokens a pass; a regeneration from elsewhere that
    misses turns drafting off after one losing pass, not after the replay fades."""
    ledger = learnt(20, 1.5 * PLAIN, steps=10)
    ledger.begin()
    assert ledger.pays  # the cap keeps it just above break-even
    assert ledger.yield_per_pass == pytest.approx(1.1 * 1.5)
    ledger.record(3, 1, 1.5 * PLAIN)
    assert not ledger.pays
    # Without the cap the same losing pass would not have been enough.
    uncapped = learnt(20, 1.5 * PLAIN, steps=10)
    uncapped.record(3, 1, 1.5 * PLAIN)
    assert uncapped.pays


def test_a_plain_step_is_timed_now_and_then_while_every_step_drafts():
    ledger = learnt(5, 1.3 * PLAIN, steps=PLAIN_EVERY - 1)
    assert not ledger.wants_plain
    ledger.record(3, 5, 1.3 * PLAIN)
    assert ledger.wants_plain
    ledger.record(0, 1, PLAIN)
    assert not ledger.wants_plain


def probe_burst(ledger: Ledger, tokens: int, seconds: float) -> int:
    """Run the steps of one probe: each drafted pass yields ``tokens`` in ``seconds``.
    Returns how many passes the burst had."""
    passes = 0
    while ledger.probe_due():
        ledger.record(3, tokens, seconds)
        ledger.probed()
        passes += 1
        if ledger.burst == 0:
            break
    return passes


def test_probes_are_bursts_further_apart_while_they_do_not_pay():
    ledger = learnt(1, 1.5 * PLAIN)  # drafting does not pay
    gaps = []
    for _ in range(6):
        assert probe_burst(ledger, 1, 1.5 * PLAIN) == PROBE_BURST
        gaps.append(ledger.probe_gap)
        for _ in range(ledger.probe_gap - 1):
            assert not ledger.probe_due()
    assert gaps == [16, 32, 64, MAX_PROBE_GAP, MAX_PROBE_GAP, MAX_PROBE_GAP]
    # A new generation (a new sibling to draft from) is probed at once.
    ledger.begin()
    assert probe_burst(ledger, 1, 1.5 * PLAIN) == PROBE_BURST
    # The text starts to repeat: one burst that pays turns drafting on, probes close.
    for _ in range(ledger.probe_gap - 1):
        ledger.probe_due()
    assert probe_burst(ledger, 3, 1.5 * PLAIN) == PROBE_BURST
    assert ledger.pays and ledger.probe_gap == ledger.probe_every == 8
    # While drafting pays a probe is a single pass.
    for _ in range(7):
        assert not ledger.probe_due()
    assert probe_burst(ledger, 3, 1.5 * PLAIN) == 1


def test_one_missed_pass_in_a_burst_does_not_decide():
    """About half of the passes that pay on average accept nothing: a burst of a miss
    and three passes of two tokens, at 1.4 plain steps each, pays."""
    ledger = learnt(1, 1.4 * PLAIN)
    assert not ledger.pays
    assert ledger.probe_due()
    for tokens in (1, 2, 2, 2):
        ledger.record(3, tokens, 1.4 * PLAIN)
        ledger.probed()
        if tokens == 1:
            assert not ledger.pays and ledger.probe_due()  # the burst goes on
        elif ledger.burst:
            assert ledger.probe_due()
    assert ledger.pays


def test_the_static_cost_is_calibrated_to_the_measured_pass():
    cost = Cost(0.1, 0.025)  # a pass of 3 drafts: 1.175 plain steps
    assert Ledger().calibrated(cost) is cost  # nothing measured yet
    measured = learnt(2, 1.35 * PLAIN).calibrated(cost)
    assert measured.of(3) == pytest.approx(1.35)
    assert measured.jump / measured.slope == pytest.approx(cost.jump / cost.slope)
    # A pass measured cheaper than a plain step: the scale stops at its floor.
    floor = learnt(2, 0.5 * PLAIN).calibrated(cost)
    assert floor.jump == pytest.approx(0.25 * cost.jump)


def test_drafts_that_ride_along_for_free_cost_nothing_and_stay_free_when_calibrated():
    """float32 on oneDNN's reordered weights: a block of up to five rows costs a step."""
    cost = Cost(0.05, 0.06, free=4)
    assert cost.of(0) == 1.0 and cost.of(1) == cost.of(4) == pytest.approx(1.05)
    assert cost.of(10) == pytest.approx(1.05 + 6 * 0.06)
    measured = learnt(2, 1.10 * PLAIN).calibrated(cost)
    assert measured.free == 4 and measured.of(2) == pytest.approx(1.10)


def test_the_tree_and_lookahead_modes_always_draft():
    ledger = Ledger(always=True)
    for _ in range(5):
        ledger.record(0, 1, PLAIN)
    for _ in range(8):
        ledger.record(3, 1, 5 * PLAIN)
    assert ledger.pays and ledger.cost_ratio == pytest.approx(5.0)
