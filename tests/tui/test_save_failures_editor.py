"""The editor on a session whose disk fills up (a real tmpfs): a lasting warning in the
status bar, every change kept and written once there is room, and "Save session
elsewhere" as the way out (issue 30)."""

from __future__ import annotations

import asyncio

from loomterm import store
from loomterm.store import journal
from tests.test_bad_environment import tmpfs  # noqa: F401
from tests.test_save_failures import fill
from tests.tui.conftest import TERMINAL, paste, settle, type_text


async def wait_until(pilot, predicate, timeout: float = 40.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if predicate():
            return
        await pilot.pause(0.1)
    raise AssertionError("timed out")


async def test_a_full_disk_is_said_until_it_is_saved_and_nothing_typed_is_lost(
    tmpfs,  # noqa: F811
    make_app,
    loom,
    monkeypatch,
):
    from loomterm.sessions.session import Session, close_session

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "story.loom"
    Session.create(loom, path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "Once upon a time")
        await settle(pilot)
        assert "NOT SAVED" not in app.status.full_text
        filler = fill(data)
        await type_text(pilot, " there was a disk ")
        await paste(pilot, "that filled up " * 30)  # more than the file has room for
        await settle(pilot)
        await wait_until(pilot, lambda: "NOT SAVED" in app.status.full_text)
        bar = app.status.full_text
        assert "full" in bar and "journal" in bar
        await pilot.pause(1.5)  # a toast would be gone by now; the warning stays
        await type_text(pilot, " and more")
        await settle(pilot)
        assert "NOT SAVED" in app.status.full_text
        text = app.doc.text
        assert journal.journal_files(path)
        filler.unlink()  # room again: the next try writes everything
        await wait_until(pilot, lambda: "NOT SAVED" not in app.status.full_text)
        assert journal.journal_files(path) == []
        await pilot.press("ctrl+q")
    close_session(app.loom)
    data_read = store.load(path)
    assert data_read.path_text(data_read.cursor_node) == text


async def test_save_elsewhere_writes_everything_to_another_path(
    tmpfs,  # noqa: F811
    make_app,
    loom,
    monkeypatch,
    tmp_path,
):
    from loomterm.sessions.session import Session, close_session

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    path = data / "story.loom"
    Session.create(loom, path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "Once upon a time")
        await settle(pilot)
        fill(data)
        await type_text(pilot, " the disk filled")
        await paste(pilot, " the disk filled" * 20)  # more than the file has room for
        await settle(pilot)
        await wait_until(pilot, lambda: "NOT SAVED" in app.status.full_text)
        text = app.doc.text
        elsewhere = tmp_path / "other" / "rescued.loom"
        await app.run_action("save_elsewhere")
        await pilot.pause(0.2)
        app.screen.query_one("#name").value = str(elsewhere)
        await pilot.press("enter")
        await wait_until(pilot, lambda: "NOT SAVED" not in app.status.full_text)
        await settle(pilot)
        assert app.session_name == "rescued"
        await type_text(pilot, " safe now")
        await settle(pilot)
        text += " safe now"
        await pilot.press("ctrl+q")
    close_session(app.loom)
    rescued = store.load(elsewhere)
    assert rescued.path_text(rescued.cursor_node) == text
    assert journal.journal_files(path)  # the full disk's file keeps its own journal
