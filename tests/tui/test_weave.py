"""Weave in the editor: the dialog, the run in the worker, progress, escape, the result."""

from __future__ import annotations

import threading

from textual.widgets import Input, Label

from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.weave_dialog import LIMITS, SCORES, WeaveScreen
from tests.helpers import assert_matches_recompute
from tests.tui.conftest import TERMINAL, paste, settle
from tests.tui.screen_text import screen_text


async def fill(pilot, **values) -> None:
    """Set the dialog's number fields."""
    for name, value in values.items():
        pilot.app.screen.query_one(f"#weave-{name}", Input).value = str(value)
    await pilot.pause()


def weave_nodes(loom) -> list:
    return [n for n in loom.tree.nodes.values() if "weave" in n.meta]


def notes(app) -> list:
    return list(app._notifications)  # noqa: SLF001 - the toasts shown


def status_text(app) -> str:
    return app.status.full_text


async def test_weave_grows_the_tree_and_shows_the_best_branch(make_app, loom):
    # No end-of-text: a kept branch the model ended is rightly not grown, which would
    # leave the second level out (unseeded sampling ended one now and then).
    never = {str(token): "never" for token in loom.eos_ids}
    loom.update_settings(temperature=1.0, logit_bias=never)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("alt+e")
        await pilot.pause()
        assert isinstance(app.screen, WeaveScreen)
        assert "Weave from the caret" in screen_text(app)
        await fill(pilot, n=3, depth=2, keep=1, tokens=5)
        await pilot.press("ctrl+s")
        await settle(pilot)
        made = weave_nodes(loom)
        assert len(made) == 3 + 3
        start = next(n for n in loom.tree.nodes.values() if loom.text(n) == "Once upon a time")
        level1 = start.children
        assert len(level1) == 3 and all(len(n.tokens) <= 5 for n in made)
        grown = [n for n in level1 if n.children]
        assert len(grown) == 1 and len(grown[0].children) == 3  # only the kept one grew
        # The document stands on the best leaf of the last level, the engine's cursor too.
        assert loom.cursor in grown[0].children
        assert app.doc.text == loom.text(loom.cursor)
        assert_matches_recompute(loom, loom.cursor)
        assert "weave" not in status_text(app) and not app.generating
        assert {n.meta["weave"] for n in made} == {made[0].meta["weave"]}
        # The branch pane lists the woven branches, each as its preview shows it (the
        # unseeded text may hold line breaks or stray bytes: shown as the pane shows them).
        text = screen_text(app)
        shown = [safe_line(app.panes.node_text(n).strip())[:6] for n in level1]
        assert sum(label in text for label in shown if label) >= 2, (shown, text)
        # The dialog offers the last shape again.
        await pilot.press("alt+e")
        await pilot.pause()
        assert app.screen.query_one("#weave-n", Input).value == "3"
        await pilot.press("escape")
        await settle(pilot)
        assert len(weave_nodes(loom)) == 6  # cancelled dialog: nothing made


async def test_progress_in_the_status_bar_and_escape_keeps_what_exists(make_app, loom):
    # No end-of-text: every kept node can grow, so the levels have their full size.
    loom.update_settings(temperature=1.0, logit_bias={str(t): "never" for t in loom.eos_ids})
    hold, release, added = threading.Event(), threading.Event(), []

    def listener(event, node):
        """On the worker: hold the weave when level 2's second batch begins."""
        grand = node.parent.parent if node is not None and node.parent is not None else None
        if event == "add" and grand is not None and loom.text(grand) == "Once upon a time":
            added.append(node)
            if len(added) == 5:
                hold.set()
                release.wait(10)

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        loom.subscribe(listener)
        await pilot.press("alt+e")
        await pilot.pause()
        await fill(pilot, n=4, depth=3, keep=2, tokens=6)
        await pilot.press("enter")
        for _ in range(500):
            await pilot.pause(0.02)
            if hold.is_set():
                break
        assert hold.is_set(), "the weave never reached level 2's second batch"
        await pilot.pause(0.3)  # the status timer
        assert "weave level 2/3 \u00b7 4/8 nodes" in status_text(app)
        assert "esc stops" in status_text(app)
        await pilot.press("escape")
        release.set()
        await settle(pilot)
        loom.unsubscribe(listener)
        made = weave_nodes(loom)
        start = made[0].parent
        level1, level2 = start.children, [k for n in start.children for k in n.children]
        assert len(level1) == 4 and sum(bool(n.children) for n in level1) == 2
        assert len(level2) == 8 and len(made) == 12  # the stopped batch's rows are kept
        assert set(added) == set(level2)
        assert [len(n.tokens) for n in added[:4]] == [6] * 4  # the first batch was whole
        assert all(1 <= len(n.tokens) < 6 for n in added[4:])  # the second one stopped
        assert not app.generating and "weave" not in status_text(app)
        assert any(n.message.startswith("Weave stopped: 12 nodes") for n in notes(app))
        for node in made:
            assert_matches_recompute(loom, node)
        assert loom.cursor in level2 and app.doc.text == loom.text(loom.cursor)
        # The editor goes on as usual.
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert loom.cursor.parent in level2


async def test_bad_values_are_named_and_nothing_starts(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("alt+e")
        await pilot.pause()
        await fill(pilot, n=0, keep="two")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, WeaveScreen)  # still open
        problems = str(app.screen.query_one("#weave-problems", Label).render())
        assert "Children per node (n) must be a whole number from 1 to 64" in problems
        assert "Kept per level (k) must be" in problems
        await pilot.press("escape")
        await settle(pilot)
        assert weave_nodes(loom) == []


async def test_weave_from_an_empty_document_is_one_line(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+e")
        await pilot.pause()
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert any("nothing to weave from" in n.message for n in notes(app))
        assert weave_nodes(loom) == [] and not app.generating
        assert not app.view.locked  # the document takes typing again


async def test_the_palette_runs_weave(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Weave")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, WeaveScreen)


def test_the_dialog_agrees_with_the_engine():
    from loomterm.engine.loom import weave

    assert tuple(value for _, value in SCORES) == weave.SCORES
    assert LIMITS["n"] == LIMITS["keep"] == weave.MAX_N and LIMITS["depth"] == weave.MAX_DEPTH


async def test_ratings_given_during_a_weave_steer_it(make_app, loom):
    """A rating given while the weave runs reaches the tree before the level is ranked."""
    loom.update_settings(temperature=1.0, logit_bias={str(t): "never" for t in loom.eos_ids})
    hold, release, added = threading.Event(), threading.Event(), []

    def listener(event, node):
        """On the worker: hold the weave once level 1's four children exist."""
        if event == "add" and node.parent is not None and loom.text(node.parent) == "Once":
            added.append(node)
            if len(added) == 4:
                hold.set()
                release.wait(10)

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once")
        await settle(pilot)
        assert not app.weave.weaving and not app.weave.rate_while_weaving(loom.root, 1)
        loom.subscribe(listener)
        await pilot.press("alt+e")
        await pilot.pause()
        await fill(pilot, n=4, depth=2, keep=2, tokens=4)
        app.screen.query_one("#weave-score").value = "rating"
        await pilot.press("ctrl+s")
        for _ in range(500):
            await pilot.pause(0.02)
            if hold.is_set():
                break
        assert hold.is_set() and app.weave.weaving
        # The rating keys would do this while a weave runs; nothing waits for the weave.
        assert app.weave.rate_while_weaving(added[3], 1)
        assert app.weave.rate_while_weaving(added[0], -1)
        assert "rating" not in added[3].meta  # not yet: the worker applies it
        release.set()
        await settle(pilot)
        loom.unsubscribe(listener)
        assert added[3].meta["rating"] == 1 and added[0].meta["rating"] == -1
        grown = [n for n in added if n.children]
        assert added[3] in grown and added[0] not in grown and len(grown) == 2
        assert loom.cursor.parent is added[3]  # good first: the best is below it
