"""A reopened session puts the caret where the user left it: after a quit, after a
session switch and back, and after a pause (the caret is written once it rests)."""

from __future__ import annotations

import json
import sqlite3

from loomterm.engine import Loom
from loomterm.sessions.session import close_session, load_session, open_loom, save_loom, session_of
from loomterm.store import Caret
from loomterm.tui.controllers.caret import CARET_DELAY
from loomterm.tui.widgets.sessions import SessionsScreen
from tests.helpers import caret_writes
from tests.tui.conftest import TERMINAL, settle
from tests.tui.test_session_picker import make_session

STEM, LEAF = "Once upon a time, in a far kingdom,", " there lived a weaver."


def story(loom: Loom) -> Loom:
    """A document of two nodes; the cursor at its end."""
    stem = loom.append(loom.root, STEM)
    loom.cursor = loom.append(stem, LEAF)
    return loom


def set_caret_row(path, value) -> None:
    conn = sqlite3.connect(path)
    if value is None:
        conn.execute("DELETE FROM session WHERE key = 'caret'")
    else:
        conn.execute(
            "INSERT OR REPLACE INTO session(key, value) VALUES ('caret', ?)", (json.dumps(value),)
        )
    conn.commit()
    conn.close()


async def test_quit_and_reopen_puts_the_caret_back(make_app, loom, tiny_llama_dir, tmp_path):
    path = tmp_path / "story.loom"
    save_loom(story(loom), path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        assert app.doc.caret == app.doc.length  # nothing recorded: at the end
        await pilot.press("ctrl+home", *["right"] * 9)  # "Once upon|", in the first node
        await pilot.pause()
        assert app.doc.caret == 9
        await pilot.press("ctrl+q")  # at once: no time for the settle timer
        await pilot.pause(0.3)
    close_session(loom)
    assert load_session(path).caret == Caret(loom.cursor.id, 9)

    again = open_loom(path, model=str(tiny_llama_dir), device="cpu")
    try:
        app2 = make_app(target_loom=again)
        async with app2.run_test(size=TERMINAL) as pilot:
            await settle(pilot)
            assert app2.doc.text == STEM + LEAF
            assert app2.doc.caret == 9
            assert app2.doc.node_before_caret().id == loom.cursor.parent.id  # the stem
            assert not app2.view.follow  # generation would not drag the caret along
            await pilot.press("x")  # the caret is really there: typing goes in at it
            await settle(pilot)
            assert app2.doc.text == "Once uponx a time, in a far kingdom," + LEAF
            await pilot.press("ctrl+q")
            await pilot.pause(0.3)
    finally:
        close_session(again)


async def test_the_caret_is_written_once_it_rests_not_per_key(make_app, loom, tmp_path):
    """No quit: a pause is enough for the caret to be on disk (a kill -9 then keeps it),
    and a burst of keys is one write, not one per key."""
    path = tmp_path / "story.loom"
    save_loom(story(loom), path)
    store = session_of(loom).recorder.store
    writes = caret_writes(store)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+home", *["right"] * 20)
        await pilot.pause(CARET_DELAY + 0.8)
        assert load_session(path).caret == Caret(loom.cursor.id, 20)  # the app still runs
        assert 1 <= len(writes) <= 2  # 21 caret moves (a slow machine may split the burst)
        count = len(writes)
        await pilot.pause(CARET_DELAY + 0.3)  # resting longer writes nothing more
        assert len(writes) == count
        await pilot.press("ctrl+end")  # the end is recorded as the end
        await pilot.pause(CARET_DELAY + 0.8)
        assert load_session(path).caret == Caret(loom.cursor.id, None)
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
    close_session(loom)


async def test_a_file_without_a_caret_or_with_one_past_the_end_opens_at_the_end(
    make_app, loom, tiny_llama_dir, tmp_path
):
    path = tmp_path / "story.loom"
    save_loom(story(loom), path)
    close_session(loom)
    for value in (None, {"node": loom.cursor.id, "char": 10_000}, "garbage"):
        set_caret_row(path, value)  # None: as an older loomterm wrote it, no key at all
        again = open_loom(path, model=str(tiny_llama_dir), device="cpu")
        try:
            app = make_app(target_loom=again)
            async with app.run_test(size=TERMINAL) as pilot:
                await settle(pilot)
                assert app.doc.text == STEM + LEAF
                assert app.doc.caret == app.doc.length, value
        finally:
            close_session(again)


async def test_a_caret_of_another_node_is_not_used(make_app, loom, tiny_llama_dir, tmp_path):
    """The cursor moved (a script, the CLI) without the caret: the caret goes to the end."""
    path = tmp_path / "story.loom"
    save_loom(story(loom), path)
    close_session(loom)
    set_caret_row(path, {"node": loom.cursor.parent.id, "char": 4})
    again = open_loom(path, model=str(tiny_llama_dir), device="cpu")
    try:
        app = make_app(target_loom=again)
        async with app.run_test(size=TERMINAL) as pilot:
            await settle(pilot)
            assert app.doc.caret == app.doc.length
    finally:
        close_session(again)


async def open_other(pilot, name: str) -> None:
    await pilot.press("ctrl+o")
    await pilot.pause()
    picker = pilot.app.screen
    assert isinstance(picker, SessionsScreen)
    picker.query_one("DataTable").move_cursor(row=[r.name for r in picker.rows].index(name))
    await pilot.press("enter")
    await settle(pilot)


async def test_a_session_switch_and_back_keeps_each_caret(make_app, tiny_loaded):
    other = make_session(tiny_loaded, "other", "The other story goes on and on")
    close_session(other)
    first = make_session(tiny_loaded, "story", None)
    story(first)
    app = make_app(target_loom=first)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+home", *["right"] * 9)
        await pilot.pause()
        await open_other(pilot, "other")  # the picker, at once: no pause to settle
        assert app.session_name == "other" and app.doc.caret == app.doc.length
        await pilot.press("ctrl+home", *["right"] * 3)
        await pilot.pause()

        await app.run_action("previous_session")  # back to "story"
        await settle(pilot)
        assert app.session_name == "story" and app.doc.text == STEM + LEAF
        assert app.doc.caret == 9
        assert app.history.undo() is None  # the first place of the session is there

        await open_other(pilot, "other")
        assert app.session_name == "other" and app.doc.caret == 3
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
    close_session(app.loom)
    assert load_session("story").caret.char == 9
    assert load_session("other").caret.char == 3


async def test_renaming_the_open_session_keeps_its_caret(make_app, tiny_loaded):
    first = make_session(tiny_loaded, "story", None)
    story(first)
    app = make_app(target_loom=first)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+home", *["right"] * 12)
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("r")  # the open session is the picker's first row
        await pilot.pause()
        app.screen.query_one("#name").value = "tale"
        await pilot.press("enter")
        await settle(pilot)
        assert app.session_name == "tale" and app.doc.text == STEM + LEAF
        assert app.doc.caret == 12
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
    close_session(app.loom)
