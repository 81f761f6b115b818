"""Switching to a session on the model in memory whose table names a server (another
model it had attached): the editor asks before the key goes there, once per server in a
run; "not now" sends none (the server stays recorded, with the one-line note)."""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from loomterm.sessions.session import close_session, save_loom, session_path
from loomterm.tui.key_consent import KeyConsentScreen, forget_answers
from loomterm.tui.widgets.sessions import SessionChoice
from tests.remote.hostile import Hostile
from tests.tui.conftest import TERMINAL, settle

CANARY = "sk-canary-switch-77aa"


@pytest.fixture
def hostile(monkeypatch):
    monkeypatch.setenv("LOOMTERM_API_KEY", CANARY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    forget_answers()
    server = Hostile(status=401).start()
    yield server
    server.stop()
    forget_answers()


def with_server_in_table(loom: Loom, name: str, url: str) -> None:
    """Save ``loom`` as ``name`` with a server recorded as another attached model."""
    from loomterm.store import SessionStore

    path = session_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    loom.cursor = loom.append(loom.root, "The other")
    save_loom(loom, path)
    table = dict(loom.model_table)
    table["bait"] = {"kind": "llama-server", "source": url, "name": "bait", "fingerprint": {}}
    state = {"active": loom.active_model, "attached": [loom.active_model, "bait"]}
    close_session(loom)
    store = SessionStore.open(path)
    try:
        store.set_models(table, state)
    finally:
        store.close()


async def wait(pilot, done, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if done():
            return
        await pilot.pause(0.05)
    raise AssertionError("it did not happen in time")


async def test_switching_asks_before_a_tables_server_gets_the_key(make_app, tiny_loaded, hostile):
    with_server_in_table(Loom.from_loaded(tiny_loaded, n_ctx=512), "other", hostile.url)
    story = Loom.from_loaded(tiny_loaded, n_ctx=512)
    story.cursor = story.append(story.root, "Once upon a time")  # kept when left
    save_loom(story, session_path("story"))
    app = make_app(target_loom=story)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        app.sessions.switch(SessionChoice("open", session_path("other")))
        await wait(pilot, lambda: isinstance(app.screen, KeyConsentScreen))
        assert app.screen.question == f"Send your API key (LOOMTERM_API_KEY) to {hostile.url}?"
        assert hostile.seen == []  # nothing goes out while it asks
        await pilot.press("n")
        await wait(pilot, lambda: app.session_name == "other")
        await settle(pilot)
        assert hostile.seen and hostile.authorizations() == [None] * len(hostile.seen)
        assert "bait" in app.loom.model_notes and CANARY not in app.loom.model_notes["bait"]

        app.sessions.switch(SessionChoice("open", session_path("story")))
        await wait(pilot, lambda: app.session_name == "story")
        await settle(pilot)
        app.sessions.switch(SessionChoice("open", session_path("other")))
        await wait(pilot, lambda: app.session_name == "other")  # asked once in a run
        await settle(pilot)
        assert not isinstance(app.screen, KeyConsentScreen)
        assert hostile.authorizations() == [None] * len(hostile.seen)
