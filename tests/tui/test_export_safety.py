"""The export dialog (ctrl+e) as a person uses it: it never writes over a session,
replaces an existing file only once confirmed, opens on the documents folder, and
remembers the last folder of each session in the session's file."""

from __future__ import annotations

import hashlib
from pathlib import Path

from loomterm.config.locations import documents_dir
from loomterm.sessions.session import close_session, open_loom, save_loom, session_path
from tests.tui.conftest import TERMINAL, paste, settle


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _export_to(pilot, app, path: Path | str):
    await pilot.press("ctrl+e")
    await settle(pilot)
    screen = app.screen
    screen.query_one("#path").value = str(path)
    await pilot.press("ctrl+s")
    await settle(pilot)
    return screen


def _status(screen) -> str:
    return str(screen.query_one("#export-status").render()).strip()


async def test_an_existing_file_is_replaced_only_once_confirmed(make_app, loom, exports):
    target = exports / "mine.md"
    target.write_text("my own notes\n")
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        screen = await _export_to(pilot, app, target)
        assert app.screen is screen
        assert "exists: export again to replace it" in _status(screen)
        assert "\n" not in _status(screen)
        assert str(screen.query_one("#export").label) == "Replace"
        assert target.read_text() == "my own notes\n"
        # Another file name: no longer the one confirmed.
        screen.query_one("#path").value = str(exports / "other.md")
        await pilot.pause()
        assert str(screen.query_one("#export").label) == "Export"
        screen.query_one("#path").value = str(target)
        await pilot.press("ctrl+s")  # asks again: the confirmation was for this file
        await settle(pilot)
        assert target.read_text() == "my own notes\n" and app.screen is screen
        await pilot.press("ctrl+s")  # confirmed
        await settle(pilot)
        assert app.screen is not screen
        assert "Once upon a time" in target.read_text()


async def test_the_dialog_never_writes_over_a_session(make_app, loom, exports):
    save_loom(loom, "story")
    own = session_path("story")
    other = exports / "disguised.md"
    other.write_bytes(own.read_bytes())
    app = make_app()
    try:
        async with app.run_test(size=TERMINAL) as pilot:
            await paste(pilot, "Once upon a time")
            await settle(pilot)
            for target in (own, other):
                before = sha(target)
                screen = await _export_to(pilot, app, target)
                await pilot.press("ctrl+s")  # no confirmation makes it go through
                await settle(pilot)
                assert app.screen is screen
                assert "never writes over a session" in _status(screen)
                assert sha(target) == before
                await pilot.press("escape")
                await settle(pilot)
    finally:
        close_session(loom)


async def test_the_dialog_opens_on_the_documents_folder(make_app, loom):
    app = make_app(export_dir=None)
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+e")
        await settle(pilot)
        assert app.screen.query_one("#path").value == str(documents_dir() / "story.md")


async def test_each_session_remembers_its_export_folder(make_app, loom, exports):
    save_loom(loom, "story")
    folder = exports / "chapters"
    folder.mkdir()
    app = make_app(export_dir=None)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        await _export_to(pilot, app, folder / "draft.md")
        assert (folder / "draft.md").is_file()
    close_session(loom)
    # Opened again, in a new editor: the dialog offers that folder.
    again = open_loom("story")
    try:
        app = make_app(again, export_dir=None)
        async with app.run_test(size=TERMINAL) as pilot:
            await pilot.press("ctrl+e")
            await settle(pilot)
            assert app.screen.query_one("#path").value == str(folder / "story.md")
    finally:
        close_session(again)
