"""Sessions inside the editor: the picker (ctrl+o) opens, creates, renames and deletes
sessions; a new chat asks before moving to a new session and the user can go back; a
session left with nothing written in it is not kept."""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from loomterm.sessions.session import (
    close_session,
    load_session,
    save_loom,
    session_of,
    session_path,
)
from loomterm.tui.widgets.dialogs import ChatScreen, ConfirmScreen, NameScreen
from loomterm.tui.widgets.sessions import SessionsScreen
from tests.tui.conftest import TERMINAL, settle
from tests.tui.screen_text import screen_text


def make_session(tiny_loaded, name: str, text: str | None) -> Loom:
    loom = Loom.from_loaded(tiny_loaded, n_ctx=512)
    loom.update_settings(temperature=0.0, max_new_tokens=8)
    if text is not None:
        loom.cursor = loom.append(loom.root, text)
    path = session_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    return loom


@pytest.fixture
def two_sessions(tiny_loaded):
    other = make_session(tiny_loaded, "other", "The other story")
    close_session(other)
    story = make_session(tiny_loaded, "story", "Once upon a time")
    yield story
    close_session(story)


async def open_picker(pilot) -> SessionsScreen:
    await pilot.press("ctrl+o")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, SessionsScreen)
    return screen


async def test_the_picker_lists_sessions_and_opens_one_in_place(make_app, two_sessions):
    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        picker = await open_picker(pilot)
        shown = screen_text(app)
        assert "\u25cf" in shown and "story" in shown and "other" in shown
        assert "tiny-llama" in shown and "KiB" in shown  # model and size
        assert [row.name for row in picker.rows if row.current] == ["story"]
        row = [r.name for r in picker.rows].index("other")
        picker.query_one("DataTable").move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot)
        assert app.session_name == "other"
        assert app.doc.text == "The other story"
        assert session_of(two_sessions).closed
        assert app.sessions.previous == session_path("story")

        await app.run_action("previous_session")
        await settle(pilot)
        assert app.session_name == "story" and app.doc.text == "Once upon a time"
        close_session(app.loom)


async def test_down_then_enter_in_one_burst_opens_the_row_below(make_app, two_sessions):
    """Keys that arrive together (a fast typist, SSH): enter must see the row that down
    moved to (a priority enter ran before the table had taken the down)."""
    from textual import events

    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        picker = await open_picker(pilot)
        names = [row.name for row in picker.rows]
        assert names[0] == "story"  # the open one, where the cursor starts
        app.post_message(events.Key("down", None))
        app.post_message(events.Key("enter", "\r"))
        await settle(pilot)
        assert app.session_name == names[1] == "other"
        close_session(app.loom)


async def test_create_then_leave_an_empty_session_leaves_nothing(make_app, two_sessions):
    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        await open_picker(pilot)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, NameScreen)
        app.screen.query_one("#name").value = "blank"
        await pilot.press("enter")
        await settle(pilot)
        assert app.session_name == "blank" and app.doc.text == ""
        assert session_path("blank").exists()
        assert "ctrl+g" in screen_text(app)  # the first screen says how to start

        await app.run_action("previous_session")
        await settle(pilot)
        assert app.session_name == "story"
        assert not session_path("blank").exists()  # nothing was written in it
        close_session(app.loom)


async def test_a_new_session_keeps_the_samplers_but_not_the_storys_memory(make_app, two_sessions):
    """Memory, author's note and world info belong to a story: a new session from the
    picker starts without them (they used to be copied, unseen, into the new story)."""
    two_sessions.update_settings(
        memory="Mara is a weaver.",
        authors_note="[Style: terse]",
        world_info={"scan_depth": 64, "entries": [{"keys": ["loom"], "text": "Oak."}]},
    )
    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        await open_picker(pilot)
        await pilot.press("n")
        await pilot.pause()
        app.screen.query_one("#name").value = "fresh"
        await pilot.press("enter")
        await settle(pilot)
        assert app.session_name == "fresh"
        settings = app.loom.settings
        assert (settings.memory, settings.authors_note) == ("", "")
        assert settings.world_info["entries"] == []
        assert (settings.temperature, settings.max_new_tokens) == (0.0, 8)
        await pilot.press("alt+v")  # the context view: nothing but the document
        await pilot.pause()
        assert "Mara" not in screen_text(app)
        await app.run_action("previous_session")
        await settle(pilot)
        assert app.loom.settings.memory == "Mara is a weaver."  # the old story kept it
        close_session(app.loom)


async def test_rename_and_delete(make_app, two_sessions):
    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        picker = await open_picker(pilot)
        table = picker.query_one("DataTable")
        table.move_cursor(row=[r.name for r in picker.rows].index("other"))
        await pilot.press("r")
        await pilot.pause()
        app.screen.query_one("#name").value = "renamed"
        await pilot.press("enter")
        await pilot.pause()
        assert {r.name for r in picker.rows} == {"story", "renamed"}
        assert load_session("renamed").path_text() == "The other story"
        assert not session_path("other").exists()

        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause()
        assert [r.name for r in picker.rows] == ["story"]
        assert not session_path("renamed").exists()

        await pilot.press("d")  # the open session: refused
        await pilot.pause()
        assert app.screen is picker and session_path("story").exists()

        await pilot.press("r")  # renaming the open session reopens it under the new name
        await pilot.pause()
        app.screen.query_one("#name").value = "tale"
        await pilot.press("enter")
        await settle(pilot)
        assert app.session_name == "tale" and app.doc.text == "Once upon a time"
        assert session_of(app.loom).path == session_path("tale")
        assert not session_path("story").exists()
        close_session(app.loom)


async def test_new_chat_in_a_used_session_asks_first_and_can_go_back(make_app, two_sessions):
    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        await app.run_action("new_chat")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "new session" in screen_text(app)
        await pilot.press("n")  # no: nothing moves
        await pilot.pause()
        assert app.loom is two_sessions and not isinstance(app.screen, ChatScreen)

        await app.run_action("new_chat")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        app.screen.query_one("#name").value = "chat"
        app.screen.query_one("#user").text = "Hi"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.session_name == "chat"
        assert any("Back to previous session" in n.message for n in app._notifications)  # noqa: SLF001

        await app.run_action("previous_session")
        await settle(pilot)
        assert app.session_name == "story" and app.doc.text == "Once upon a time"
        assert session_path("chat").exists()  # the chat is kept
        close_session(app.loom)


async def test_a_name_in_use_keeps_the_name_dialog_open_and_says_why(make_app, two_sessions):
    """Renaming to a name a session has, or a new session under it: the dialog stays,
    with the typed name and the reason, instead of closing on the error (and the list
    with it) so the writer must start again."""
    from loomterm.tui.widgets.dialogs import NameScreen

    app = make_app(target_loom=two_sessions)
    async with app.run_test(size=TERMINAL) as pilot:
        picker = await open_picker(pilot)
        table = picker.query_one("DataTable")
        table.move_cursor(row=[r.name for r in picker.rows].index("other"))
        for key in ("r", "n"):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, NameScreen)
            app.screen.query_one("#name").value = "story"
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, NameScreen)  # still open
            assert app.screen.query_one("#name").value == "story"
            notes = [n.message for n in app._notifications]  # noqa: SLF001 - as test_no_markup
            assert any("'story' exists already" in note for note in notes)
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is picker
        assert {r.name for r in picker.rows} == {"story", "other"}
        close_session(app.loom)
