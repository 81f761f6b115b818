"""Search cannot freeze the editor (Pilot, the real engine on the tiny model): the red
team's ``(a|a)+$`` over long runs of ``a`` froze it for 114 s on Python's engine; now
RE2 answers it, and a pattern only a backtracking engine can run searches on its own
thread, keys answering meanwhile, and ends at its deadline in one line."""

from __future__ import annotations

import asyncio
import time

from textual import events

from loomterm.tui.widgets.search import SearchScreen
from tests.tui.conftest import TERMINAL, settle, type_text
from tests.tui.screen_text import screen_text

RUN = "a" * 5_000 + "b\n"


def grow(loom, nodes: int) -> None:
    node = loom.root
    for _ in range(nodes):
        node = loom.append(node, RUN)
    loom.cursor = node


async def open_regex_search(pilot) -> SearchScreen:
    await pilot.press("ctrl+f")
    await pilot.pause()
    await pilot.press("alt+r")
    screen = pilot.app.screen
    assert isinstance(screen, SearchScreen)
    return screen


async def key_times(pilot, keys: str) -> list[float]:
    """Seconds from each key reaching the app to the query field showing it: the UI
    thread's own answer (``pilot.press`` adds its waits for idle on top)."""
    field = pilot.app.screen.query_one("#search-text")
    took = []
    for key in keys:
        before = field.value
        start = time.perf_counter()
        pilot.app.post_message(events.Key(key, key))
        while field.value == before and time.perf_counter() - start < 60:
            await asyncio.sleep(0.002)
        took.append(time.perf_counter() - start)
    return took


async def test_the_red_teams_pattern_answers_and_keys_answer(make_app, loom):
    grow(loom, 8)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        screen = await open_regex_search(pilot)
        await type_text(pilot, "(a|a)+$")
        await asyncio.sleep(0.06)  # the search starts once typing pauses
        took = await key_times(pilot, "xy")  # typed while it searches
        assert max(took) < 0.1, took
        for _ in "xy":
            await pilot.press("backspace")
        await settle(pilot)
        assert screen.query_one("#search-text").value == "(a|a)+$"
        assert "0 hits in 8 nodes" in screen_text(app)
        await pilot.press("backspace")
        await type_text(pilot, "b$")  # (a|a)+b$: one hit on each run
        await settle(pilot)
        assert "8 hits in 8 nodes" in screen_text(app)
        for _ in range(4):
            await pilot.press("backspace")
        await type_text(pilot, "b$")  # (a|ab$: a bad pattern, one line
        await settle(pilot)
        assert isinstance(app.screen, SearchScreen), screen_text(app)
        assert "bad regular expression: missing )" in screen_text(app)


async def test_a_backtracking_pattern_keeps_keys_answering_and_ends_in_one_line(make_app, loom):
    grow(loom, 2)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.search.deadline_s = 2.0
        screen = await open_regex_search(pilot)
        # \b over Unicode: RE2 cannot say it; 2^n ways to fail on "aaaa...b\n".
        await type_text(pilot, r"(\w|\w)+\b[^\w\n]")
        await pilot.pause(0.3)
        assert app.search.busy  # still searching...
        took = await key_times(pilot, "zz")  # ...and keys answer
        assert max(took) < 0.1, took
        await pilot.press("backspace", "backspace")
        # The backspaces stop the "zz" search and, once typing pauses, start this one: the
        # dialog says "searching…" until its answer comes (busy alone is briefly False
        # between the two).
        start = time.monotonic()
        status = "searching\u2026"
        while status == "searching\u2026" and time.monotonic() - start < 30:
            await pilot.pause(0.1)
            status = str(screen.query_one("#search-status").render())
        assert status.startswith("regular expression too slow here"), status
        assert "Traceback" not in screen_text(app)
