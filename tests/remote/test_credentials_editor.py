"""The editor asks before the API key goes to a server a session file names: a dialog
names the host; "not now" sends nothing, "always" sends it and remembers the answer in
the config. The server is the recording attacker of ``hostile``."""

from __future__ import annotations

import json

import pytest

from loomterm.engine.remote.credentials import resolve, revoke_all
from loomterm.engine.remote.server_config import config_path
from loomterm.tui.key_consent import forget_answers
from tests.remote.hostile import Hostile
from tests.remote.test_credentials import CANARY, tree_json
from tests.tui.conftest import TERMINAL


@pytest.fixture
def bait(tmp_path, monkeypatch):
    """A session imported from a shared JSON tree whose model is a hostile server."""
    from loomterm.export import read_import
    from loomterm.sessions.session import import_session, session_path

    monkeypatch.setenv("LOOMTERM_API_KEY", CANARY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    forget_answers()
    server = Hostile(status=401).start()
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps(tree_json(server.url)), encoding="utf-8")
    target = session_path("shared")
    import_session(read_import(shared), target)
    yield server, target
    server.stop()
    forget_answers()


def opening_app(target):
    from loomterm.config.settings import EngineOptions
    from loomterm.sessions.opening import SessionOpening
    from loomterm.sessions.session import read_file
    from loomterm.tui.app import LoomApp

    opening = SessionOpening(target, EngineOptions(), read_file(target))
    app = LoomApp(opening.preview(), session_name="shared", opening=opening, show_speed=False)
    return app, opening


async def answer(pilot, server: Hostile, key: str):
    """Wait for the dialog, check that nothing went out while it asks, answer ``key``."""
    from loomterm.tui.key_consent import KeyConsentScreen

    for _ in range(100):
        if isinstance(pilot.app.screen, KeyConsentScreen):
            break
        await pilot.pause(0.05)
    screen = pilot.app.screen
    assert isinstance(screen, KeyConsentScreen)
    assert screen.question == f"Send your API key (LOOMTERM_API_KEY) to {server.url}?"
    await pilot.pause(0.3)
    assert server.seen == []  # nothing goes out while it asks
    await pilot.press(key)
    await pilot.pause(0.1)


async def until(pilot, done, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if done():
            return
        await pilot.pause(0.05)
    raise AssertionError("it did not happen in time")


async def test_not_now_sends_no_key(bait):
    server, target = bait
    app, opening = opening_app(target)
    try:
        async with app.run_test(size=TERMINAL) as pilot:
            await answer(pilot, server, "n")
            await until(pilot, lambda: app.load_error is not None)
        assert server.seen and server.authorizations() == [None] * len(server.seen)
        error = str(app.load_error)  # the command line prints it, as one line
        assert "asks for an API key (401" in error and CANARY not in error
        assert "send_key = true" in error
    finally:
        opening.close()
    assert not config_path().exists()  # "not now" remembers nothing


async def test_always_sends_the_key_and_remembers_the_answer(bait):
    server, target = bait
    app, opening = opening_app(target)
    try:
        async with app.run_test(size=TERMINAL) as pilot:
            await answer(pilot, server, "a")
            await until(pilot, lambda: app.load_error is not None)
        assert server.authorizations()[0] == f"Bearer {CANARY}"
        assert "refused the API key (401" in str(app.load_error)
    finally:
        opening.close()
    assert "send_key = true" in config_path().read_text()
    assert CANARY not in config_path().read_text()
    revoke_all()
    assert resolve(server.url, "file").key == CANARY  # the next run asks no more


async def test_the_model_view_shows_what_goes_to_the_server_masked(
    llama_server, tmp_path, monkeypatch
):
    monkeypatch.delenv("LOOMTERM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from loomterm.engine import Loom
    from loomterm.engine.remote import connect
    from loomterm.tui.app import LoomApp
    from loomterm.tui.widgets.model_details import ModelDetailsScreen

    server = Hostile(upstream=llama_server.url).start()
    try:
        config_path().write_text(
            f'[servers."{server.url}"]\n'
            'headers = { "X-Api-Key" = "sk-view-canary-123456", "X-Org" = "org-7" }\n'
            'body = { "custom_field" = 1, "prompt" = "hijack" }\n',
            encoding="utf-8",
        )
        loom = Loom(connect(server.url, named_by="file"))
        app = LoomApp(loom, show_speed=False, export_dir=tmp_path, session_name="view")
        async with app.run_test(size=TERMINAL) as pilot:
            await pilot.press("ctrl+p")
            await pilot.pause(0.2)
            for key in "Model details":
                await pilot.press("space" if key == " " else key)
            await pilot.pause(0.5)
            await pilot.press("enter")
            for _ in range(40):
                if isinstance(app.screen, ModelDetailsScreen):
                    break
                await pilot.pause(0.05)
            assert isinstance(app.screen, ModelDetailsScreen)
            shown = "\n".join(app.screen.lines)
            await pilot.press("escape")
        assert f"  {server.url}" in shown
        assert "  API key: none" in shown  # LOOMTERM_API_KEY is not set here
        assert "  header X-Api-Key: \u2022\u2022\u2022\u2022\u2022\u202256" in shown
        assert "  header X-Org: org-7" in shown
        assert "  body custom_field: 1" in shown
        assert "  body prompt: ignored (loomterm sets it)" in shown
        assert "sk-view-canary" not in shown
        loom.runner.close()
    finally:
        server.stop()
