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
