"""A 1 MB paste: accepted whole, shown at once, nothing lost (engine and session file),
and the editor stays responsive: typing after it, and generating from its end."""

from __future__ import annotations

import time

from textual import events

from loomterm.sessions.session import close_session, save_loom, session_of
from loomterm.store import load
from tests.tui.conftest import TERMINAL, settle
from tests.tui.screen_text import screen_text

SENTENCE = "The quick brown fox jumps over the lazy dog; café 日本 😀.\n"
MEGABYTE = (
    (SENTENCE * (2**20 // len(SENTENCE.encode()) + 1)).encode()[: 2**20].decode(errors="ignore")
)


async def test_a_one_megabyte_paste_is_kept_whole(make_app, loom, tmp_path):
    path = tmp_path / "big.loom"
    save_loom(loom, path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        began = time.monotonic()
        app.view.post_message(events.Paste(MEGABYTE))
        await pilot.pause()
        shown = time.monotonic() - began
        assert app.doc.text == MEGABYTE
        assert "café 日本 😀." in screen_text(app)  # the view follows the caret to the end
        await settle(pilot, timeout=60)
        synced = time.monotonic() - began
        assert loom.text(loom.cursor) == MEGABYTE
        errors = [n.message for n in app._notifications if n.severity == "error"]  # noqa: SLF001
        assert not errors

        # Still responsive: typing after the paste shows at once and reaches the engine.
        await pilot.press("!")
        assert app.doc.text == MEGABYTE + "!"
        await settle(pilot, timeout=60)
        assert loom.text(loom.cursor) == MEGABYTE + "!"

        # Generating from the end works on a document far past the context window.
        began_gen = time.monotonic()
        await pilot.press("ctrl+g")
        await settle(pilot, timeout=120)
        generated = time.monotonic() - began_gen
        assert loom.text(loom.cursor).startswith(MEGABYTE + "!")
        assert app.doc.text == loom.text(loom.cursor)
        errors = [n.message for n in app._notifications if n.severity == "error"]  # noqa: SLF001
        print(
            f"1 MB paste: shown in {shown:.2f} s, synced in {synced:.2f} s, "
            f"generated in {generated:.2f} s; errors {errors}"
        )

        session_of(loom).flush()
        data = load(path)
        node = data.tree.nodes[data.cursor]
        stored = "".join("".join(data.pieces[n.id]) for n in node.path())
        assert stored == app.doc.text
    close_session(loom)
