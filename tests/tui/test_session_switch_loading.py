"""Switching in the editor to a session on a model that is not in memory: the session is
on the screen at once, from its file, while its model loads in the background (as at
start); typing meanwhile lands in it, in order; a model that cannot load sends the
editor back to the session it left."""

from __future__ import annotations

import shutil
import threading

from loomterm.engine import Loom
from loomterm.engine.models.load import load_model
from loomterm.sessions.session import Session, close_session, save_loom, session_of, session_path
from loomterm.tui.widgets.sessions import SessionChoice
from tests.tui.conftest import TERMINAL, settle
from tests.tui.test_models import messages


def saved(loom: Loom, name: str, text: str) -> Loom:
    loom.update_settings(temperature=0.0, max_new_tokens=4)
    loom.cursor = loom.append(loom.root, text)
    path = session_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    return loom


async def watch_until(pilot, app, predicate, seen: list, timeout: float = 60.0) -> None:
    """Pause in small steps, noting ``(text, model ready, session)`` each time, until
    ``predicate`` holds."""
    for _ in range(int(timeout / 0.02)):
        await pilot.pause(0.02)
        seen.append((app.doc.text, app.model_ready, app.session_name))
        if predicate():
            return
    raise AssertionError(f"timed out; seen {seen[-3:]}")


def held_at_preview(app, gate: threading.Event | None = None) -> list:
    """Note ``(text, model ready, session)`` the moment the switched-to session is put
    on the screen; with ``gate``, the engine waits for it before it loads the model
    (a job queued first), so the test can type while the model is surely loading."""
    seen: list = []
    real = app.sessions.previewed

    def previewed(message) -> None:
        if gate is not None:
            app.jobs.submit("test gate", lambda: gate.wait(60))
        real(message)
        seen.append((app.doc.text, app.model_ready, app.session_name))

    app.sessions.previewed = previewed
    return seen


async def test_a_session_on_another_model_shows_at_once_and_takes_typing(
    make_app, tiny_loaded, tiny_gpt2_dir, tmp_path
):
    gpt2_dir = shutil.copytree(tiny_gpt2_dir, tmp_path / "gpt2")
    other = saved(Loom.from_loaded(load_model(str(gpt2_dir)), n_ctx=512), "other", "The other")
    close_session(other)
    story = saved(Loom.from_loaded(tiny_loaded, n_ctx=512), "story", "Once upon a time")
    app = make_app(target_loom=story)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        gate = threading.Event()
        at_preview = held_at_preview(app, gate)
        app.sessions.switch(SessionChoice("open", session_path("other")))
        seen: list = []
        await watch_until(pilot, app, lambda: app.session_name == "other", seen)
        # On the screen, from its file, before its model is there.
        assert at_preview == [("The other", False, "other")]
        assert session_of(story).closed
        await pilot.press(*" story")  # typed while the model loads
        await pilot.press("ctrl+g")  # needs the model: held, then run
        await pilot.pause(0.2)
        assert not app.model_ready and app.doc.text == "The other story"
        gate.set()
        await watch_until(pilot, app, lambda: app.model_ready, seen)
        await settle(pilot)
        assert app.loom.runner.loaded.source == str(gpt2_dir)
        assert app.doc.text.startswith("The other story")
        assert len(app.doc.text) > len("The other story")  # the held generation ran
        assert app.sessions.previous == session_path("story")
        text = app.doc.text
        close_session(app.loom)
    reopened = Session.open(session_path("other"), model=str(gpt2_dir), device="cpu").loom
    assert reopened.text(reopened.cursor) == text
    close_session(reopened)


async def test_a_model_that_cannot_load_sends_the_editor_back(
    make_app, tiny_loaded, tiny_gpt2_dir, tmp_path
):
    gpt2_dir = shutil.copytree(tiny_gpt2_dir, tmp_path / "gone")
    other = saved(Loom.from_loaded(load_model(str(gpt2_dir)), n_ctx=512), "other", "The other")
    close_session(other)
    shutil.rmtree(gpt2_dir)  # the session's model is not there any more
    story = saved(Loom.from_loaded(tiny_loaded, n_ctx=512), "story", "Once upon a time")
    app = make_app(target_loom=story)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        at_preview = held_at_preview(app)
        app.sessions.switch(SessionChoice("open", session_path("other")))
        seen: list = []
        await watch_until(pilot, app, lambda: bool(messages(app, "error")), seen)
        await settle(pilot)
        assert at_preview == [("The other", False, "other")]  # shown while it loaded
        assert app.doc.text == "Once upon a time" and app.model_ready
        assert app.loom.runner.loaded is tiny_loaded
        assert app.return_code is None  # the editor stayed
        assert app.sessions.previous is None  # back where it was: nothing to go back to
        assert any("cannot open that session" in m for m in messages(app, "error"))
        close_session(app.loom)
    # The file of the session that could not open was given back: it opens again.
    again = Session.open(session_path("other"), model=str(tiny_gpt2_dir), device="cpu").loom
    assert again.text(again.cursor) == "The other"
    close_session(again)
