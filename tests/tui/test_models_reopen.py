"""A session with several models, in the editor: opened, it says in one line which
models did not come back and why (their branches stay, recorded); switched to from
another session (the picker, "Back to previous session"), its models come back too,
those already in memory without loading them again, and its active model with them."""

from __future__ import annotations

import shutil

import pytest

from loomterm.engine import Loom
from loomterm.engine.local_runner import LocalRunner
from loomterm.engine.models import load_model
from loomterm.session import Session, close_session, save_loom, session_path
from tests.tui.conftest import TERMINAL, settle
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
        assert "g (recorded)" in app.model_legend().plain
        assert app.loom.tree.nodes[written.id].meta["model"] == "g"
        assert app.writer_colour(app.loom.tree.nodes[written.id]) is not None  # coloured
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
