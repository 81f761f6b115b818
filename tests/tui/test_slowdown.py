"""When decoding collapses mid-generation (another process took a core), the status
bar says how far and what helps; a steady rate says nothing."""

from __future__ import annotations

import re

from loomterm.tui.controllers.slowdown import Slowdown


def feed(watch: Slowdown, rates: list[tuple[float, float]], start: float = 0.0) -> float:
    """Tokens at ``rate`` for ``seconds``, for each (rate, seconds), one tenth at a time."""
    now, total = start, 0.0
    for rate, seconds in rates:
        for _ in range(int(seconds * 10)):
            now += 0.1
            total += rate * 0.1
            watch.tokens(int(total), now)
    return now


def test_a_collapse_is_told_with_what_helps():
    watch = Slowdown()
    watch.start(("m", 1))
    feed(watch, [(30.0, 4.0)])
    assert not watch.slow and 29 <= watch.best[("m", 1)] <= 31
    feed(watch, [(30.0, 4.0), (6.0, 3.0)])
    assert watch.slow
    assert watch.advice(2).endswith("the CPU is busy elsewhere (--threads 1 helps)")
    assert "--threads" not in watch.advice(1)  # one thread already: nothing to add
    watch.start(("m", 1))  # the next generation starts afresh, the best kept
    feed(watch, [(25.0, 3.0)])
    assert not watch.slow


def test_a_steady_rate_and_other_batch_sizes_say_nothing():
    watch = Slowdown()
    watch.start(("m", 1))
    feed(watch, [(30.0, 4.0)])
    watch.start(("m", 8))  # eight rows: its own best
    feed(watch, [(9.0, 4.0)])
    assert not watch.slow
    watch.start(("m", 1))
    feed(watch, [(0.5, 6.0)])  # too few tokens in any window to judge
    assert not watch.slow


async def test_the_status_bar_says_it(make_app, loom):
    from tests.tui.conftest import TERMINAL, settle

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        loom.runner.threads = 2
        watch = app.generation.slowdown
        watch.start((loom.active_model, 1))
        feed(watch, [(30.0, 4.0), (5.0, 3.0)])
        state = app.generation.state()
        assert re.match(r"generating · slow: 5\.\d tok/s, was 30\.\d; the CPU is busy", state)
        assert "(--threads 1 helps)" in state and state.endswith("esc stops")
