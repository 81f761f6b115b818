"""Generating: from the end, from the middle, regenerating, N siblings, stopping."""

from __future__ import annotations

from loomterm.tree import Origin
from loomterm.tui.widgets.status_bar import human_bytes
from tests.tui.conftest import TERMINAL, paste, settle, type_text, write_and_generate
from tests.tui.screen_text import screen_text


async def test_generate_streams_a_continuation_from_the_caret(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time")
        node = loom.cursor
        assert node.origin is Origin.MODEL
        assert len(node.tokens) == 12
        assert loom.text(node.parent) == "Once upon a time"
        assert app.doc.text == loom.text(node)
        assert app.doc.caret == app.doc.length
        shown = screen_text(app)
        first_line = app.doc.text.splitlines()[0][:40]
        assert first_line.split("\n")[0][:10] in shown


async def test_generating_syncs_pending_typing_first(make_app, loom):
    app = make_app(sync_delay=10.0)
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Language models")
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert loom.text(loom.cursor.parent) == "Language models"


async def test_generate_from_the_middle_starts_a_branch_there(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "The quick brown fox")
        first = loom.cursor
        await pilot.press("ctrl+home", *["right"] * 9)  # "The quick|"
        await pilot.press("ctrl+g")
        await settle(pilot)
        second = loom.cursor
        assert second is not first
        assert loom.text(second.parent) == "The quick"
        assert loom.text(first).startswith("The quick brown fox")  # still there
        assert app.doc.text == loom.text(second)


async def test_generate_inside_a_token_keeps_the_typed_part(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "The quick brown fox")
        await pilot.press("ctrl+home", *["right"] * 7)  # "The qui|ck"
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert loom.text(loom.cursor.parent) == "The qui"


async def test_regenerate_adds_a_sibling(make_app, loom):
    loom.update_settings(temperature=1.0)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot)
        first = loom.cursor
        await pilot.press("ctrl+r")
        await settle(pilot)
        second = loom.cursor
        assert second is not first
        assert second.parent is first.parent
        assert second.origin is Origin.MODEL


async def test_generate_n_makes_n_siblings_at_once(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("ctrl+n")
        await settle(pilot)
        parent = loom.cursor.parent
        assert len(parent.children) == 3
        assert all(len(kid.tokens) == 12 for kid in parent.children)
        assert loom.cursor is parent.children[0]


def paced(monkeypatch, seconds: float = 0.002) -> None:
    """Each streamed token takes ``seconds`` more: on a fast machine the tiny model
    writes 1,500 tokens before a key press arrives."""
    import time

    from loomterm.tui.controllers.generation_job import Streamer

    on_token = Streamer.on_token

    def slow(streamer, node, token_id, piece):
        time.sleep(seconds)
        on_token(streamer, node, token_id, piece)

    monkeypatch.setattr(Streamer, "on_token", slow)


async def test_escape_stops_and_keeps_what_came(make_app, loom, monkeypatch):
    loom.update_settings(max_new_tokens=1500)
    paced(monkeypatch)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("ctrl+g")
        for _ in range(100):
            await pilot.pause(0.02)
            if app.doc.length > len("Once upon a time") + 3:
                break
        await pilot.press("escape")
        await settle(pilot)
        node = loom.cursor
        assert node.origin is Origin.MODEL
        assert 0 < len(node.tokens) < 1500
        assert app.doc.text == loom.text(node)
        assert not app.generating


async def test_typing_over_a_generation_stops_it_and_keeps_the_typing(make_app, loom, monkeypatch):
    loom.update_settings(max_new_tokens=1500)
    paced(monkeypatch)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("ctrl+g")
        for _ in range(100):
            await pilot.pause(0.02)
            if app.doc.length > len("Once upon a time") + 3:
                break
        await type_text(pilot, "XYZ")
        await settle(pilot)
        assert not app.generating
        assert loom.text(loom.cursor).endswith("XYZ")
        assert app.doc.text == loom.text(loom.cursor)


async def test_generating_from_an_empty_document_says_why_not(make_app, loom):
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert loom.root.children == []
        assert any("nothing to continue" in n.message for n in app._notifications)  # noqa: SLF001
        assert not app.generating


async def test_status_bar_shows_kv_as_the_total(make_app, loom, monkeypatch):
    """``Loom.kv_bytes`` gives bytes, or a breakdown of them: the bar shows the total."""

    class Memory:
        nodes, working, total = 1024, 2048, 3072

    app = make_app()
    # Wide enough for the whole bar (a narrow one leaves the counts out first).
    async with app.run_test(size=(160, TERMINAL[1])) as pilot:
        await write_and_generate(pilot, "Once upon a time")
        memory = loom.kv_bytes()
        assert f"KV {human_bytes(getattr(memory, 'total', memory))} " in screen_text(app)
        monkeypatch.setattr(loom, "kv_bytes", Memory)
        app.status_line.refresh()
        await pilot.pause()
        assert "KV 3.0 KiB " in screen_text(app)


async def test_the_saved_cursor_follows_a_generation_as_it_is_written(
    make_app, loom, tmp_path, monkeypatch
):
    """A crash mid-generation (kill -9) reopens at the text being written: the cursor
    moves to the new child at its first token, in the session file too."""
    from loomterm import store
    from loomterm.sessions.session import close_session, save_loom

    path = tmp_path / "crash.loom"
    save_loom(loom, path)
    loom.update_settings(max_new_tokens=100_000)
    paced(monkeypatch, 0.02)  # still writing when looked at
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await settle(pilot)
        start = loom.cursor
        await pilot.press("ctrl+g")
        for _ in range(200):
            await pilot.pause(0.02)
            if len(app.doc.text) > len("Once upon a time") + 3:
                break
        assert app.generating
        child = loom.cursor
        assert child.parent is start and child.origin is Origin.MODEL
        assert store.load(path).cursor == child.id  # already in the file
        await pilot.press("escape")
        await settle(pilot)
        assert loom.cursor is child
    close_session(loom)
