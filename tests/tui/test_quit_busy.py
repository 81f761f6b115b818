"""Quitting while the engine's job does not stop in time (a long llama.cpp step, a
prefill chunk on a busy core): the editor leaves after ``QUIT_WAIT`` anyway, with the
text the model has not read written into the session file, and the session closed
beside the job (``tui.controllers.lifecycle``). The tmux tests time the whole process:
``test_tmux_quit_busy.py``."""

from __future__ import annotations

import threading
import time

from tests.tui.conftest import TERMINAL, settle, type_text


async def test_quit_leaves_a_job_that_does_not_stop(make_app, loom):
    from loomterm.sessions.session import read_file, save_loom, session_path
    from loomterm.tui.controllers.lifecycle import QUIT_WAIT

    path = session_path("busy")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    app = make_app(sync_delay=10.0)  # the typing is not read before the quit
    release = threading.Event()
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await type_text(pilot, "kept words")
        # A job that looks at neither the cancel nor the interrupt event.
        app.jobs.submit("long", lambda: release.wait(30))
        await pilot.pause(0.1)
        assert app.jobs.running == "long"
        asked = time.monotonic()
        await pilot.press("ctrl+q")
        while app.return_code is None and time.monotonic() - asked < 10:
            await pilot.pause(0.02)
        waited = time.monotonic() - asked
        assert app.return_code == 0
        assert app.jobs.running == "long"  # left running: the command leaves without it
    release.set()
    assert waited >= QUIT_WAIT * 0.9  # it gave the job its chance first
    opened = read_file(path, True)
    try:
        assert opened.data.typed is not None and opened.data.typed.text == "kept words"
    finally:
        opened.close()


async def test_quit_keeps_the_typing_once(make_app, loom):
    """Whether the engine read the typing before the editor left (the usual case) or
    not (a loaded machine, past ``QUIT_WAIT``), the file holds it exactly once: in the
    tree with no typing kept beside it, or kept as typing over the tree it was typed
    on (a reopen would otherwise show it twice)."""
    from loomterm.sessions.session import close_session, read_file, save_loom, session_path

    path = session_path("calm")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    app = make_app(sync_delay=10.0)
    async with app.run_test(size=TERMINAL) as pilot:
        await settle(pilot)
        await type_text(pilot, "last words")
        await pilot.press("ctrl+q")
        asked = time.monotonic()
        while app.return_code is None and time.monotonic() - asked < 10:
            await pilot.pause(0.02)
    while app.jobs.running is not None:  # a job left running ends on its own
        time.sleep(0.05)
    close_session(loom)
    opened = read_file(path, True)
    try:
        data = opened.data
        if data.typed is None:
            assert data.path_text() == "last words"
        else:
            assert data.typed.text == "last words"
            assert data.text(data.tree.nodes[data.typed.node]) == ""
    finally:
        opened.close()
