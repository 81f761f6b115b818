"""Banned phrases in the editor: what a banned phrase took back leaves the screen."""

from __future__ import annotations

from loomterm.tui.controllers.generation import Generation
from tests.tui.conftest import TERMINAL, settle, write_and_generate


async def test_a_banned_phrase_never_reaches_the_screen(make_app, loom):
    # What the model writes here, greedily, without a ban:
    probe = loom.append(loom.root, "Once upon a time")
    (kid,) = loom.generate(probe, 12, temperature=0)
    written = loom.decode(kid.tokens)
    phrase = written.strip()[:4]
    assert phrase
    loom.update_settings(banned_strings=[phrase])
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await write_and_generate(pilot, "Once upon a time")
        await settle(pilot)
        node = loom.cursor
        assert phrase not in loom.decode(node.tokens)
        assert phrase not in app.doc.text[len("Once upon a time") :]


async def test_the_streamer_drops_what_was_taken_back(make_app, loom):
    from loomterm.tui.controllers.generation_job import Streamer

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        posted = []
        app.post_message = posted.append  # what the worker would send the UI
        streamer = Streamer(app)
        node = loom.append(loom.root, "Hello there")
        for i, piece in enumerate(["a", "b", "c", "d"]):
            streamer.on_token(node, i, piece)
        streamer.flush()
        streamer.on_take_back(node, 2)
        assert isinstance(posted[-1], Generation.TakenBack) and posted[-1].length == 2
        assert streamer.shown == 2 and streamer.pieces == []
        await pilot.pause()
