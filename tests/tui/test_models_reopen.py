"""A session with several models, in the editor: opened, it says in one line which
models did not come back and why (their branches stay, recorded); switched to from
another session (the picker, "Back to previous session"), its models come back too,
those already in memory without loading them again, and its active model with them."""

from __future__ import annotations

import shutil

import pytest

from loomterm.engine import Loom
from loomterm.engine.local.runner import LocalRunner
from loomterm.engine.models.load import load_model
from loomterm.sessions.session import Session, close_session, save_loom, session_path
from tests.tui.conftest import TERMINAL, settle
from tests.tui.screen_text import screen_text
from tests.tui.test_models import messages


@pytest.fixture
def gpt2_folder(tiny_gpt2_dir, tmp_path):
    return shutil.copytree(tiny_gpt2_dir, tmp_path / "gpt2")


def session_with_gpt2(tiny_loaded, gpt2, name: str, text: str) -> Loom:
    """A saved session on the tiny Llama with the GPT-2 (``gpt2``: a LoadedModel)
    attached as "g", which wrote a branch and is active."""
    loom = Loom.from_loaded(tiny_loaded, n_ctx=512)
    loom.update_settings(temperature=0.0, max_new_tokens=6)
    path = session_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    loom.attach("g", LocalRunner(gpt2, n_ctx=512))
    prompt = loom.append(loom.root, text)
    [kid] = loom.generate(prompt, 4, model="g")
    loom.cursor = kid
    loom.use("g")
    return loom


async def test_a_model_that_did_not_come_back_is_said_on_opening(
    make_app, tiny_loaded, gpt2_folder
):
    loom = session_with_gpt2(tiny_loaded, load_model(str(gpt2_folder)), "pair", "Once")
    written = loom.cursor
    close_session(loom)
    shutil.rmtree(gpt2_folder)
    reopened = Session.open(session_path("pair"), reattach=True, on_note=lambda _note: None)
    app = make_app(reopened.loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        [warning] = messages(app, "warning")
        assert warning.startswith("Model g was not re-attached: its folder ")
        assert "is gone" in warning and "its branches stay (recorded)" in warning
        assert "\n" not in warning
        assert "g (recorded)" in app.models.legend.plain
        assert app.loom.tree.nodes[written.id].meta["model"] == "g"
        assert app.models.writer_colour(app.loom.tree.nodes[written.id]) is not None  # coloured
    close_session(reopened.loom)


async def test_switching_sessions_brings_their_models_back(make_app, tiny_loaded, gpt2_folder):
    gpt2 = load_model(str(gpt2_folder))
    other = session_with_gpt2(tiny_loaded, gpt2, "other", "The other story")
    close_session(other)
    story = session_with_gpt2(tiny_loaded, gpt2, "story", "Once upon a time")
    main = next(iter(story.models))
    app = make_app(story)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await app.run_action("app.sessions")
        await pilot.pause()
        picker = app.screen
        row = [r.name for r in picker.rows].index("other")
        picker.query_one("DataTable").move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot, timeout=60)
        new = app.loom
        assert app.session_name == "other" and new is not story
        assert list(new.models) == [main, "g"] and new.active_model == "g"
        assert new.models["g"].loaded is gpt2  # in memory already: not loaded again
        assert messages(app, "warning") == []
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert new.cursor.meta["model"] == "g"
    close_session(app.loom)


def test_opening_in_place_reports_the_loading(tiny_loaded, gpt2_folder, tiny_gpt2_dir):
    """A session whose model is not in memory is loaded with progress reports."""
    from loomterm.tui import sessions

    gpt2 = load_model(str(gpt2_folder))
    other = Loom.from_loaded(gpt2, n_ctx=512)
    path = session_path("on-gpt2")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(other, path)
    close_session(other)
    current = Loom.from_loaded(tiny_loaded, n_ctx=512)
    heard: list[tuple[str, int, int | None]] = []
    new = sessions.open_in_place(current, path, progress=lambda *report: heard.append(report))
    assert new.runner.loaded is not tiny_loaded  # its own model, loaded now
    stages = {stage for stage, _, _ in heard}
    assert "load" in stages, heard
    assert any(done == total for stage, done, total in heard if stage == "load")  # it ended
    close_session(new)


async def test_the_status_bar_shows_loading_until_it_ends(make_app, tiny_loaded):
    loom = Loom.from_loaded(tiny_loaded, n_ctx=512)
    app = make_app(loom)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        app.progress.report("load", 3, 10)  # as the worker thread reports it
        await pilot.pause(0.3)
        assert "load 3/10\u2026" in screen_text(app).splitlines()[-2]
        app.progress.report("load", 10, 10)
        await pilot.pause(0.3)
        assert "load 10/10" not in screen_text(app) and "load 3/10" not in screen_text(app)
