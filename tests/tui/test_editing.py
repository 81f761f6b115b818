"""Typing, caret moves, safe display of control characters, and syncing to the engine."""

from __future__ import annotations

from tests.tui.conftest import TERMINAL, paste, settle, type_text
from tests.tui.screen_text import screen_text


async def test_typing_changes_the_screen_at_once_and_reaches_the_engine_later(make_app, loom):
    app = make_app(sync_delay=5.0)  # long enough that nothing syncs during the test
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "Once upon a time")
        await pilot.pause()
        assert app.doc.text == "Once upon a time"
        assert "Once upon a time" in screen_text(app)
        assert app.doc.dirty
        assert loom.cursor is loom.root  # the engine has not been asked yet
        app.typing.sync_now()
        await settle(pilot)
        assert loom.text(loom.cursor) == "Once upon a time"
        assert not app.doc.dirty


async def test_typing_pause_syncs_by_itself(make_app, loom):
    app = make_app(sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "The quick brown fox")
        await settle(pilot)
        assert loom.text(loom.cursor) == "The quick brown fox"


async def test_backspace_delete_and_caret_moves(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "hello world")
        await pilot.press("home")
        assert app.doc.caret == 0
        await pilot.press("delete")
        await type_text(pilot, "H")
        await pilot.press("end", "backspace")
        assert app.doc.text == "Hello worl"
        await pilot.press("ctrl+left")
        assert app.doc.caret == len("Hello ")
        await pilot.press("ctrl+left", "ctrl+right")
        assert app.doc.caret == len("Hello")
        await pilot.press("left", "left", "right")
        assert app.doc.caret == len("Hell")
        await pilot.press("ctrl+end")
        assert app.doc.caret == app.doc.length
        await settle(pilot)
        assert loom.text(loom.cursor) == "Hello worl"


async def test_editing_in_the_middle_of_own_text_changes_it_in_place(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "The quick brown fox")
        await settle(pilot)
        first = loom.cursor
        await pilot.press("ctrl+home", *["right"] * 4)
        await type_text(pilot, "very ")
        await settle(pilot)
        assert loom.cursor is first  # the writer's own childless node: no sibling
        assert loom.text(first) == "The very quick brown fox"
        assert len(loom.tree.nodes) == 2


async def test_editing_in_the_middle_splices_a_new_branch(make_app, loom):
    """Text with children below it (here a generation) is not changed: the edit is a
    new branch, and the rest of the typing goes into that branch."""
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "The quick brown fox")
        await pilot.press("ctrl+g")
        await settle(pilot)
        first = loom.cursor
        before = loom.text(first)
        await pilot.press("ctrl+home", *["right"] * 4)
        await type_text(pilot, "very ")
        await settle(pilot)
        await type_text(pilot, "very ")
        await settle(pilot)
        assert loom.text(loom.cursor) == "The very very " + before[len("The ") :]
        assert loom.text(first) == before  # nothing is destroyed
        forks = [n for n in loom.tree.nodes.values() if len(n.children) > 1]
        assert len(forks) == 1 and len(forks[0].children) == 2  # one new branch


async def test_up_down_keep_the_column_across_lines(make_app):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "first line\nsecond line\nthird")
        await pilot.press("up")
        assert app.doc.caret == len("first line\nsecon")
        await pilot.press("up")
        assert app.doc.caret == len("first")
        await pilot.press("down", "down")
        assert app.doc.caret == len("first line\nsecond line\nthird")


async def test_escape_sequences_from_a_paste_are_shown_safely(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.view.focus()
        from textual import events

        app.view.post_message(events.Paste("red \x1b[31mALERT\x1b[0m \x07 bell\tend \u202eevil"))
        await pilot.pause()
        text = screen_text(app)
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
        assert "\u241b[31mALERT\u241b[0m" in text
        assert "\u2407" in text  # BEL as its control picture
        assert "\\u202e" in text  # a bidi override as an escape
        # The real characters stay in the text and reach the engine unchanged.
        await settle(pilot)
        assert "\x1b[31m" in loom.text(loom.cursor)
        # No rendered segment of the document holds a raw control character.
        for y in range(app.view.size.height):
            strip = app.view.render_line(y)
            assert all(ch.isprintable() for seg in strip for ch in seg.text)


async def test_quit_right_after_typing_keeps_the_typing(make_app, loom):
    app = make_app(sync_delay=10.0)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "last words")
        await pilot.press("ctrl+q")
        await pilot.pause(0.5)
    assert loom.text(loom.cursor) == "last words"


async def test_a_long_document_scrolls_with_the_caret(make_app, loom):
    node = loom.append(loom.root, "\n".join(f"line {i}" for i in range(200)))
    loom.cursor = node
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.pause()
        assert "line 199" in screen_text(app)  # opens at the end
        await pilot.press("ctrl+home")
        await pilot.pause()
        assert "line 0" in screen_text(app)
        assert "line 199" not in screen_text(app)
        await pilot.press("pagedown")
        await pilot.pause()
        assert app.doc.line_of(app.doc.caret) > 10


async def test_alt_keys_from_a_terminal_run_bindings_not_typing(make_app, loom):
    """A terminal sends alt+s as ESC s, which arrives with the character "s"."""
    from textual import events

    stem = loom.append(loom.root, "Once upon a time")
    loom.cursor = loom.append(stem, " there")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.post_message(events.Key("alt+s", "s"))  # as the terminal driver does
        await settle(pilot)
        assert app.doc.text == "Once upon a time there"
        assert loom.cursor.meta.get("bookmark") is True
