"""A long read (an edit near the top of a long document): the status bar shows how far
the model has read and how fast, escape stops it and keeps the edit, and typing goes on
meanwhile."""

from __future__ import annotations

import time

import pytest

from loomterm.engine.local.path_cache import PREFILL_CHUNK
from tests.tui.conftest import settle, type_text
from tests.tui.screen_text import screen_text

WORDS = "the loom wove a long and patient story of threads and colours "


@pytest.fixture
def long_loom(tiny_loaded):
    from loomterm.engine import Loom

    loom = Loom.from_loaded(tiny_loaded, n_ctx=2048)
    loom.update_settings(temperature=0.0, max_new_tokens=8, splice_mode="exact")
    text = WORDS
    # Six chunks: four still to read once the rate shows (after two), seconds of room
    # for the keys below on a loaded machine.
    while len(loom.encode(text)) < 5 * PREFILL_CHUNK + 100:
        text += WORDS
    loom.cursor = loom.append(loom.root, text)
    return loom


def slow_forward(loom, monkeypatch, seconds: float = 0.6) -> None:
    """Each 512-token chunk of a read takes ``seconds`` (the tiny model is too quick to
    watch)."""
    runner = loom.runner
    forward = runner.forward

    def slow(ids, *args, **kwargs):
        if ids.shape[-1] > 1:
            time.sleep(seconds)
        return forward(ids, *args, **kwargs)

    monkeypatch.setattr(runner, "forward", slow)


async def wait_for_status(pilot, text: str, timeout: float = 20.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        await pilot.pause(0.05)
        status = screen_text(pilot.app).splitlines()[-2]
        if text in status:
            return status
    raise AssertionError(f"{text!r} never showed; the status was {status!r}")


async def wait_for_notice(pilot, text: str, timeout: float = 20.0) -> None:
    """Wait until a notification with ``text`` shows (before it times out and goes)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(text in n.message for n in pilot.app._notifications):  # noqa: SLF001
            return
        await pilot.pause(0.05)
    raise AssertionError(f"no notification {text!r} showed")


async def test_a_long_read_shows_progress_and_escape_keeps_the_edit(
    make_app, long_loom, monkeypatch
):
    original = long_loom.cursor
    app = make_app(target_loom=long_loom)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        slow_forward(long_loom, monkeypatch)
        await pilot.press("ctrl+home")
        await type_text(pilot, "Once, ")
        edited = app.doc.text
        status = await wait_for_status(pilot, "reading ")
        assert "tokens" in status and "esc stops" in status
        done, total = status.split("reading ")[1].split(" tokens")[0].split("/")
        assert int(done.replace(",", "")) < int(total.replace(",", ""))
        status = await wait_for_status(pilot, "tok/s")  # a rate once two chunks are read

        await type_text(pilot, "X")  # typing stays immediate while the model reads
        assert app.doc.text == "Once, X" + edited[len("Once, ") :]
        await pilot.press("backspace")

        await pilot.press("escape")
        await wait_for_notice(pilot, "Stopped reading")
        await settle(pilot, timeout=30)
        assert app.doc.text == edited and not app.doc.dirty  # the edit is kept
        assert long_loom.text(long_loom.cursor) == edited  # in the tree
        assert long_loom.text(original) == edited[len("Once, ") :]  # the old text too
        assert "reading" not in screen_text(app).splitlines()[-2]

        # Generating later reads the rest and goes on from the edit.
        monkeypatch.undo()
        await pilot.press("ctrl+end", "ctrl+g")
        await settle(pilot, timeout=30)
        assert long_loom.text(long_loom.cursor).startswith(edited)
        assert len(long_loom.cursor.tokens) == 8


async def test_escape_during_a_generations_read_stops_it_and_keeps_the_typing(
    make_app, long_loom, monkeypatch
):
    app = make_app(target_loom=long_loom, sync_delay=30.0)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        slow_forward(long_loom, monkeypatch)
        await pilot.press("ctrl+home")
        await type_text(pilot, "Twice, ")
        edited = app.doc.text
        await pilot.press("ctrl+end", "ctrl+g")  # syncs the edit first: a long read
        await wait_for_status(pilot, "reading ")
        await pilot.press("escape")
        await settle(pilot, timeout=30)
        assert app.doc.text == edited and not app.doc.dirty
        assert long_loom.text(long_loom.cursor) == edited
        assert not long_loom.cursor.children  # nothing was generated


async def test_after_the_read_the_status_shows_the_generation_and_its_live_rate(
    make_app, long_loom, monkeypatch
):
    """Once the model has read the text, the status bar says it is generating, with the
    rate of the tokens so far, while they come (it used to say `reading N/N tokens` and
    a falling reading rate until the end)."""
    long_loom.update_settings(max_new_tokens=24, drafting="off")
    app = make_app(target_loom=long_loom, sync_delay=30.0, show_speed=True)
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        from loomterm.tui.controllers.generation_job import Streamer

        slow_forward(long_loom, monkeypatch, 0.4)  # a read chunk takes 0.4 s
        on_token = Streamer.on_token

        def slow_token(streamer, *args):  # and a token 0.1 s: a slow model
            time.sleep(0.1)
            on_token(streamer, *args)

        monkeypatch.setattr(Streamer, "on_token", slow_token)
        await pilot.press("ctrl+home")
        await type_text(pilot, "Thrice, ")
        await pilot.press("ctrl+end", "ctrl+g")  # syncs the edit first: a long read
        await wait_for_status(pilot, "reading ")
        status = await wait_for_status(pilot, "generating \u00b7 ")
        assert app.generating and "reading" not in status
        rate = float(status.split("generating \u00b7 ")[1].split(" tok/s")[0])
        assert 1 < rate < 20  # about 10 tok/s at 0.1 s a step, the read not counted
        await settle(pilot, timeout=60)
        assert len(long_loom.cursor.tokens) == 24
