"""The ordered input path, in process: a burst of keys posted to the app at once (as a
terminal's one read delivers them) is applied in arrival order, bindings (enter,
backspace, caret moves) and characters alike; input that arrives while the document is
held (a job whose result replaces it) waits and is applied in order, never dropped."""

from __future__ import annotations

from textual import events

from tests.tui.conftest import TERMINAL, settle


def burst(app, items: list[str]) -> None:
    """Post every key at once, the way the driver hands over one read of the terminal."""
    for item in items:
        if len(item) == 1:
            app.post_message(events.Key(item, item))
        else:
            app.post_message(events.Key(item, None))


async def test_a_burst_of_characters_and_bindings_keeps_its_order(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        keys = [*"one", "enter", *"two", "backspace", "enter", *"xy", "left", *"z", "ctrl+j"]
        burst(app, keys)
        await settle(pilot)
        assert app.doc.text == "one\ntw\nxz\ny"
        assert loom.text(loom.cursor) == "one\ntw\nxz\ny"


async def test_input_while_the_document_is_held_waits_and_keeps_its_order(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        burst(app, [*"ab"])
        await pilot.pause(0.1)
        app.view.locked = True
        burst(app, ["enter", *"cd", "backspace", "left"])
        app.post_message(events.Paste("pasted\r\nline"))
        burst(app, [*"e"])
        await pilot.pause(0.2)
        assert app.doc.text == "ab"  # held, not refused
        app.view.locked = False
        await settle(pilot)
        assert app.doc.text == "ab\npasted\nlineec"
        assert loom.text(loom.cursor) == "ab\npasted\nlineec"


async def test_a_burst_in_a_dialog_reaches_the_fields_it_was_typed_for(make_app, loom):
    """Tab moves the focus before the next key is handed on, and a field's backspace
    and arrows apply in order with its characters (Textual runs them once they have
    bubbled up to the app, behind the characters typed after them)."""
    from textual.widgets import Input

    from loomterm.tui.widgets.weave_dialog import WeaveScreen

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.push_screen(WeaveScreen())
        await settle(pilot)
        # tokens per node: "16" selected on focus, erased, "400", caret two left,
        # erase the 4, "1": "100"; back to kept per level: "2" selected, "3".
        keys = ["tab", "tab", "tab", "backspace", *"400", "left", "left", "backspace"]
        burst(app, [*keys, "1", "shift+tab", "3", "shift+tab", "shift+tab", "backspace"])
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, WeaveScreen)
        values = {n: screen.query_one(f"#weave-{n}", Input).value for n in ("n", "depth", "keep", "tokens")}  # fmt: skip
        assert values == {"n": "", "depth": "3", "keep": "3", "tokens": "100"}


async def test_keys_typed_after_the_enter_that_closes_a_dialog_go_to_the_document(make_app, loom):
    from loomterm.tui.widgets.dialogs import NameScreen

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        named: list[str | None] = []
        app.push_screen(NameScreen("Name it"), named.append)
        await settle(pilot)
        burst(app, [*"draft", "backspace", "enter", *"Once", "enter", *"upon"])
        await settle(pilot)
        assert named == ["draf"]
        assert app.doc.text == "Once\nupon"
        assert loom.text(loom.cursor) == "Once\nupon"


async def test_keys_typed_before_a_tab_stay_in_the_document(make_app, loom):
    """Tab moves the focus to the branch pane as the app reads it; the caret move and
    the character typed before it, still on their way to the document, apply there."""
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        burst(app, [*"ab", "left", "c", "tab"])
        await settle(pilot)
        assert app.doc.text == "acb"
        assert app.focused is app.branches
        assert loom.text(loom.cursor) == "acb"


async def test_enter_in_search_right_after_the_typing_goes_to_the_hit(make_app, loom):
    """Enter typed with the query, before the dialog has heard the field change, still
    searches that query and goes to the hit; the key after it is typed there."""
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        burst(app, [*"Raw A. Raw B. end"])
        await settle(pilot)
        await pilot.press("ctrl+f")
        await settle(pilot)
        burst(app, [*"Raw B", "enter", "Z"])
        await settle(pilot)
        assert app.doc.text == "Raw A. ZRaw B. end"  # the caret went to the hit
        assert loom.text(loom.cursor) == "Raw A. ZRaw B. end"


async def test_keys_after_a_jump_that_waits_for_the_engine_land_where_it_went(make_app, loom):
    """The jump to a hit waits while the engine is busy (here a job held on an event,
    as a sync of the typing before it would be); keys typed after it are held
    meanwhile, then typed at the hit, not where the caret was."""
    import threading

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        burst(app, [*"Raw A. Raw B. end"])
        await settle(pilot)
        await pilot.press("ctrl+f")
        await settle(pilot)
        release = threading.Event()
        app.jobs.submit("busy", release.wait)
        try:
            burst(app, [*"Raw B", "enter", "Z"])
            await pilot.pause(0.3)
            assert app.doc.text == "Raw A. Raw B. end"  # the Z waits with the jump
        finally:
            release.set()  # else the worker never ends, nor the app
        await settle(pilot)
        assert app.doc.text == "Raw A. ZRaw B. end"
        assert loom.text(loom.cursor) == "Raw A. ZRaw B. end"
