"""Think-ahead (``tui.controllers.think_ahead``): a pause writes what ctrl+r and ctrl+n
would ask for, out of sight (no branch, no row in the session file); the key shows it at
once, now a normal branch in the file with the runner's very tokens and records (equal
to a recompute); a key while thinking stops it within one decoding step and leaves
nothing; off means no work; another request generates as usual."""

from __future__ import annotations

import asyncio

import pytest

from loomterm.sessions.session import close_session, load_session, save_loom
from tests.engine.test_records import assert_records_match
from tests.helpers import ForwardCounter, assert_matches_recompute
from tests.tui.conftest import TERMINAL, settle, write_and_generate

PAUSE = 0.3


@pytest.fixture(autouse=True)
def no_healing(loom):
    """The prompts end inside a word; healing would split them on the first generation
    (``tests/engine/test_foresight.py`` checks that nothing is foreseen there)."""
    loom.update_settings(token_healing="off")


async def wait_for(pilot, condition, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("timed out waiting")


def think_ahead_now(app, loom) -> None:
    """Turn think-ahead on once the prompt is written (settling waits for quiet, which
    thinking ahead is not) and start the pause, as the end of a job does."""
    loom.update_settings(think_ahead="on")
    app.ahead.rest()


def thought(app, loom, count: int = 2) -> bool:
    return len(loom.foresights()) == count and not app.ahead.thinking and not app.jobs.busy


async def test_a_pause_thinks_ahead_out_of_sight_and_ctrl_r_shows_it(make_app, loom, tmp_path):
    path = tmp_path / "ahead.loom"
    save_loom(loom, path)
    loom.update_settings(temperature=1.0, think_ahead_pause=PAUSE)
    app = make_app()
    try:
        async with app.run_test(size=TERMINAL) as pilot:
            await write_and_generate(pilot)
            think_ahead_now(app, loom)
            first = loom.cursor
            nodes = set(loom.tree.nodes)
            await wait_for(pilot, lambda: thought(app, loom))
            # Out of sight: ctrl+r's sibling and ctrl+n's three children are foreseen, out of sight.
            regen, siblings = loom.foresights()
            assert regen.ask.node is first.parent and len(regen.nodes) == 1
            assert siblings.ask.node is first and len(siblings.nodes) == 3
            assert set(loom.tree.nodes) == nodes and first.parent.children == [first]
            assert first.children == []
            assert set(load_session(path).tree.nodes) == nodes  # nothing in the file
            await pilot.pause(0.2)
            assert "thought ahead" in app.status.full_text
            (kid,) = regen.nodes
            written = (list(kid.tokens), list(kid.logprobs), [list(t) for t in kid.top])

            loom.update_settings(think_ahead="off")  # no more thinking while we look
            with ForwardCounter(loom) as counter:
                await pilot.press("ctrl+r")
                await settle(pilot)
                assert counter.tokens == 0  # shown with its KV: nothing computed
            assert loom.cursor is kid and first.parent.children == [first, kid]
            assert app.doc.text == loom.text(kid)
            assert (list(kid.tokens), list(kid.logprobs), [list(t) for t in kid.top]) == (written)
            assert loom.tree.foreseen == {} and loom.foresights() == ()  # ctrl+n's: dropped
            assert_matches_recompute(loom, kid)
            assert_records_match(loom, kid, first=kid.start)
    finally:
        close_session(loom)
    stored = load_session(path).tree
    again = stored.nodes[kid.id]
    assert again.parent.id == first.parent.id
    assert (again.tokens, again.logprobs) == (written[0], written[1])
    assert len(stored.nodes) == len(nodes) + 1


async def test_ctrl_n_shows_its_siblings_at_once(make_app, loom):
    loom.update_settings(temperature=1.0, think_ahead_pause=PAUSE)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        think_ahead_now(app, loom)
        first = loom.cursor
        await wait_for(pilot, lambda: thought(app, loom))
        ahead = list(loom.foresights()[1].nodes)
        loom.update_settings(think_ahead="off")
        with ForwardCounter(loom) as counter:
            await pilot.press("ctrl+n")
            await settle(pilot)
            assert counter.tokens == 0
        assert first.children == ahead and loom.cursor is ahead[0]
        assert all(0 < len(kid.tokens) <= 12 for kid in ahead)


async def test_a_key_while_thinking_stops_it_within_one_step(make_app, loom):
    loom.update_settings(
        max_new_tokens=400, think_ahead="on", think_ahead_pause=PAUSE, temperature=1.0
    )
    app = make_app()
    seen = {"steps": 0, "after": 0}

    def step(module, inputs, output) -> None:
        import time

        seen["steps"] += 1
        cancel = app.ahead.cancel
        if cancel is not None and cancel.is_set() and app.ahead.thinking:
            seen["after"] += 1  # a thinking step begun after the key
        time.sleep(0.01)  # a slower model: the key comes while it thinks

    async with app.run_test(size=TERMINAL) as pilot:
        loom.update_settings(max_new_tokens=4)
        await write_and_generate(pilot)
        loom.update_settings(max_new_tokens=400)
        nodes = set(loom.tree.nodes)
        handle = loom.runner.model.get_input_embeddings().register_forward_hook(step)
        try:
            app.ahead.rest()
            await wait_for(pilot, lambda: app.ahead.thinking and seen["steps"] > 5)
            ahead = set(loom.tree.foreseen)  # what thinking ahead is writing now
            await pilot.press("x")
            await settle(pilot)
        finally:
            handle.remove()
        assert seen["after"] <= 1  # at most the step under way when the key came
        assert loom.tree.foreseen == {} and loom.foresights() == ()
        assert app.doc.text.endswith("x")
        assert loom.text(loom.cursor).endswith("x")
        # Nothing it wrote joined the tree (typing "x" may split the generated node
        # where "x" joins its last token: that tail is the model's, not thought ahead).
        assert ahead and not ahead & set(loom.tree.nodes)
        assert nodes <= set(loom.tree.nodes)


async def test_off_does_no_work(make_app, loom):
    loom.update_settings(think_ahead="off", think_ahead_pause=0.2)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        with ForwardCounter(loom) as counter:
            await pilot.pause(1.0)
            assert counter.tokens == 0
        assert loom.foresights() == () and app.ahead.timer is None
        assert "thinking ahead" not in app.status.full_text


async def test_another_request_generates_as_usual(make_app, loom):
    loom.update_settings(temperature=1.0, think_ahead_pause=PAUSE)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        think_ahead_now(app, loom)
        first = loom.cursor
        await wait_for(pilot, lambda: thought(app, loom))
        ahead = {d.id for f in loom.foresights() for d in f.nodes}
        loom.update_settings(n=2, think_ahead="off")  # ctrl+n now asks for two
        with ForwardCounter(loom) as counter:
            await pilot.press("ctrl+n")
            await settle(pilot)
            assert counter.tokens > 0  # generated
        assert len(first.children) == 2
        assert not ahead & {kid.id for kid in first.children}
        assert loom.tree.foreseen == {} and loom.foresights() == ()
