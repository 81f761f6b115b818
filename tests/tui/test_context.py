"""The memory / author's note / world info dialog and the context view, driven by keys."""

from __future__ import annotations

import time

from textual.widgets import Input, TextArea

from loomterm.tui.widgets.context import ContextScreen, parse_world_info, world_info_text
from tests.helpers import reference_logits, relative_error
from tests.tui.conftest import TERMINAL, paste, settle, type_text, write_and_generate
from tests.tui.screen_text import screen_text


def test_world_info_round_trips_through_the_dialog_text():
    table = {
        "scan_depth": 32,
        "entries": [{"keys": ["Ada", "the tower"], "text": "Ada lives\nin the tower."}],
    }
    text = world_info_text(table)
    assert text == "Ada, the tower: Ada lives\\nin the tower."
    assert parse_world_info(text, "32") == {
        "scan_depth": 32,
        "entries": [{"keys": ["Ada", " the tower"], "text": "Ada lives\nin the tower."}],
    }


async def test_dialog_sets_memory_note_and_world_info(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time\nthe fox ran")
        await pilot.press("f3")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ContextScreen)
        screen.query_one("#context-memory", TextArea).text = "The weaver."
        screen.query_one("#context-note", TextArea).text = "[terse]"
        screen.query_one("#context-depth", Input).value = "1"
        screen.query_one("#context-world", TextArea).text = "fox: A fox is red."
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert not isinstance(app.screen, ContextScreen)
        s = loom.settings
        assert (s.memory, s.authors_note, s.authors_note_depth) == ("The weaver.", "[terse]", 1)
        assert s.world_info["entries"] == [{"keys": ["fox"], "text": "A fox is red."}]
        # The normal view still shows the document only.
        assert "The weaver." not in screen_text(app) and "Once upon a time" in screen_text(app)
        # Generating now uses (and records) the context; it is exact.
        await pilot.press("ctrl+g")
        await settle(pilot)
        kid = loom.cursor
        assert loom.context_version(kid) == loom.context_spec().version != ""
        with loom.exclusive():
            got = loom.next_logits(kid)
            want = reference_logits(loom, loom.context_tokens(kid))
        assert relative_error(got, want) < 1e-4


async def test_typing_in_the_dialog_adds_after_the_text_already_there(make_app, loom):
    """The caret starts at the end of each field (it was at the start, so typing went
    before the memory already written)."""
    loom.update_settings(memory="The weaver.", authors_note="[terse]")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f3")
        await settle(pilot)
        assert isinstance(app.screen, ContextScreen)
        await type_text(pilot, " She spins.")
        await pilot.press("tab")
        await type_text(pilot, " [dark]")
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert loom.settings.memory == "The weaver. She spins."
        assert loom.settings.authors_note == "[terse] [dark]"


async def test_a_bad_field_is_named_and_changes_nothing(make_app, loom):
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("f3")
        await settle(pilot)
        screen = app.screen
        screen.query_one("#context-memory", TextArea).text = "Kept?"
        screen.query_one("#context-world", TextArea).text = "no colon on this line"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, ContextScreen)
        assert screen.problem.startswith("world info line 1: write the keys, a colon")
        assert screen.problem in screen_text(app)
        screen.query_one("#context-world", TextArea).text = "fox:"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert screen.problem == "world_info entry 1 (fox) has no text"
        assert screen.problem in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)
        assert loom.settings.memory == ""  # nothing changed


async def test_context_view_shows_what_the_model_sees(make_app, loom):
    loom.update_settings(
        memory="The weaver.",
        authors_note="[terse]",
        authors_note_depth=1,
        world_info={"entries": [{"keys": ["fox"], "text": "A fox is red."}]},
    )
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time\nthe fox ran")
        assert "The weaver." not in screen_text(app)
        await pilot.press("alt+v")
        await settle(pilot)
        shown = app.context_view.rendered.plain
        assert shown.startswith("What the model sees: ")
        assert f"{len(loom.context_tokens(loom.cursor))} tokens" in shown
        # Each injected part is marked, in the model's order.
        marks = [shown.index(m) for m in ("\u25b6memory", "\u25b6world info", "\u25b6author's note")]  # fmt: skip
        assert marks == sorted(marks)
        assert "\u25b6memory\u2502The weaver.\u25c0\n" in shown
        assert "Once upon a time\n\u25b6author's note\u2502[terse]\u25c0\nthe fox ran" in shown
        text = screen_text(app)
        assert "memory" in text and "[terse]" in text
        # Changing the note updates the view at once.
        loom.update_settings(authors_note="[lush]")
        await settle(pilot)
        assert "[lush]" in app.context_view.rendered.plain
        await pilot.press("alt+v")
        await settle(pilot)
        assert app.view.display and "The weaver." not in screen_text(app)


async def test_regenerate_with_the_nodes_own_context(make_app, loom):
    loom.update_settings(memory="Old memory.")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time")
        old = loom.cursor
        version = loom.context_version(old)
        assert version
        loom.update_settings(memory="New memory, quite different.")
        await pilot.press("ctrl+r")  # the current context
        await settle(pilot)
        current = loom.cursor
        assert current.parent is old.parent
        assert loom.context_version(current) == loom.context_spec().version != version
        await pilot.press("alt+left")  # back on the old node
        await settle(pilot)
        assert app.doc.node is old
        await app.run_action("regenerate_own_context")  # as the palette runs it
        await settle(pilot)
        again = loom.cursor
        assert again.parent is old.parent and again not in (old, current)
        assert loom.context_version(again) == version
        assert again.tokens == old.tokens  # greedy, same context: the same text


async def test_the_context_view_follows_a_running_generation(make_app, loom, monkeypatch):
    """alt+v during a generation: the new text appears in the view as it comes, after
    the injected parts, not only when the generation ends."""
    from loomterm.tui.controllers.generation_job import Streamer

    loom.update_settings(memory="The weaver.", max_new_tokens=40)
    on_token = Streamer.on_token

    def slow_token(streamer, *args):  # a slow model: the stream lasts a few seconds
        time.sleep(0.08)
        on_token(streamer, *args)

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await pilot.press("alt+v")
        await settle(pilot)
        monkeypatch.setattr(Streamer, "on_token", slow_token)
        await pilot.press("ctrl+g")
        seen = []
        for _ in range(200):
            await pilot.pause(0.05)
            written = app.doc.text[len("Once upon a time") :]
            if app.generating and len(written) > 8:
                seen.append(written)
                if len(seen) == 3:
                    break
        assert len(seen) == 3, "the generation was over too soon to be watched"
        shown = app.context_view.rendered.plain
        assert "\u25b6memory\u2502The weaver.\u25c0" in shown
        assert app.generating
        # Mid-stream, what is written so far is in the view (a batch may just be in),
        # its control characters shown as symbols (the tiny model writes some).
        from loomterm.sanitize import safe_text

        assert safe_text(seen[1]) in shown
        await settle(pilot)
        assert app.context_view.rendered.plain.endswith(safe_text(loom.text(loom.cursor)))


async def test_the_world_info_field_says_how_keys_are_written(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("f3")
        await settle(pilot)
        text = " ".join(screen_text(app).replace("\u2588", " ").split())
        assert "comma-separated" in text and "fox, the red fox: Foxes are red." in text
        # What the line says is what the parser reads.
        assert parse_world_info("fox, the red fox: Foxes are red.", "64")["entries"] == [
            {"keys": ["fox", " the red fox"], "text": "Foxes are red."}
        ]
