"""A session opened read-only says so (status bar, title), says once that changes are
not saved, and on quit offers to save them as a new session."""

from __future__ import annotations

import pytest

from loomterm.sessions.session import Session, close_session, load_session, save_loom, session_path
from tests.tui.conftest import TERMINAL, settle, type_text
from tests.tui.screen_text import screen_text


@pytest.fixture
def read_only_loom(loom, tiny_loaded):
    path = session_path("story")
    path.parent.mkdir(parents=True, exist_ok=True)
    loom.cursor = loom.append(loom.root, "Once upon a time")
    save_loom(loom, path)
    close_session(loom)
    opened = Session.open(path, loaded=tiny_loaded, read_only=True).loom
    opened.update_settings(temperature=0.0, max_new_tokens=8)
    yield opened
    close_session(opened)


async def test_read_only_shows_in_the_status_bar_and_title(make_app, read_only_loom):
    app = make_app(target_loom=read_only_loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        status = screen_text(app).splitlines()[-2]
        assert status.lstrip().startswith("READ-ONLY")
        assert app.title == "loomterm \u2014 story (read-only)"
        await type_text(pilot, " there")
        await settle(pilot)
        assert "READ-ONLY \u00b7 changes not saved" in screen_text(app).splitlines()[-2]
        notes = [n.message for n in app._notifications]  # noqa: SLF001
        assert sum("Read-only session" in note for note in notes) == 1


async def test_quitting_a_changed_read_only_session_saves_it_as_a_new_one(make_app, read_only_loom):
    app = make_app(target_loom=read_only_loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, " there")
        await pilot.press("ctrl+g")
        await settle(pilot)
        text = app.doc.text
        await pilot.press("ctrl+q")
        await settle(pilot)
        assert type(app.screen).__name__ == "SaveAsScreen"
        assert "not saved" in screen_text(app)
        assert app.screen.query_one("#name").value == "story-copy"
        await pilot.press("enter")
        await pilot.pause(0.5)
    assert app.return_code == 0
    assert load_session("story").path_text() == "Once upon a time"  # untouched
    assert load_session("story-copy").path_text() == text


async def test_quit_without_saving_and_stay(make_app, read_only_loom):
    app = make_app(target_loom=read_only_loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "!")
        await settle(pilot)
        await pilot.press("ctrl+q")
        await settle(pilot)
        await pilot.press("escape")  # stay
        await pilot.pause()
        assert type(app.screen).__name__ == "EditorScreen" and app.is_running
        await pilot.press("ctrl+q")
        await settle(pilot)
        app.screen.query_one("#discard").press()
        await pilot.pause(0.5)
    assert not session_path("story-copy").exists()
    assert load_session("story").path_text() == "Once upon a time"


async def test_an_unchanged_read_only_session_quits_at_once(make_app, read_only_loom):
    app = make_app(target_loom=read_only_loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+q")
        await pilot.pause(0.5)
    assert app.return_code == 0
