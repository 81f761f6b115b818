"""Typing while the model loads is saved whatever happens to the model, and ctrl+q during
a load leaves at once (issue 30, issue 32's quit item).

The slow model is a server on 127.0.0.1 that accepts connections and never answers (the
attacker of a test, not a mock): connecting to it waits for its read timeout.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from loomterm import store
from loomterm.config.settings import EngineOptions
from loomterm.sessions.opening import SessionOpening
from loomterm.sessions.session import session_path
from tests.test_bad_environment import tmpfs  # noqa: F401
from tests.tui.conftest import TERMINAL, type_text
from tests.tui.screen_text import screen_text


@pytest.fixture
def silent_server():
    """A URL where a socket accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


class HangingServer:
    """A socket on 127.0.0.1 that accepts connections and answers nothing until
    :meth:`drop` closes them all and stops listening (the load then fails)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)

    def drop(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def new_opening(model: str, name: str = "typed") -> SessionOpening:
    opening = SessionOpening(session_path(name), EngineOptions(model=model))
    opening.reserve()
    return opening


def typed_in_file(path) -> str | None:
    typed = store.load(path).typed
    return typed.text if typed is not None else None


async def test_typing_during_a_load_that_never_ends_is_in_the_file_and_quit_is_at_once(
    silent_server,
):
    from loomterm.tui.app import LoomApp

    opening = new_opening(silent_server)
    path = opening.path
    assert path.exists()  # made before the model: a kill now keeps what is typed
    app = LoomApp(opening.preview(), session_name="typed", opening=opening, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "marker one")
        await pilot.pause(0.1)
        assert app.loader is not None  # still connecting
        assert typed_in_file(path) == "marker one"  # on disk, read by another reader
        await type_text(pilot, " two")
        start = time.monotonic()
        await pilot.press("ctrl+q")
        while app.is_running and time.monotonic() - start < 5:
            await pilot.pause(0.01)
        took = time.monotonic() - start
    opening.close()
    print(f"quit during a load: {took * 1000:.0f} ms")
    assert took < 1.0, f"quit took {took:.2f} s during a load"
    assert typed_in_file(path) == "marker one two"  # the keys just before ctrl+q too


async def test_a_server_that_fails_leaves_the_typing_in_a_session_that_reopens(
    tiny_llama_dir,
):
    """A server that hangs, then drops the connection: the editor ends with the error
    and the typing is in the session; reopened on a model that loads, the text is on
    the screen again and the model reads it into the tree."""
    from loomterm.tui.app import LoomApp

    server = HangingServer()
    opening = new_opening(server.url, "failed")
    app = LoomApp(opening.preview(), session_name="failed", opening=opening, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "kept words")
        await pilot.pause(0.1)
        server.drop()
        end = time.monotonic() + 300  # importing torch first: long on a busy machine
        while app.is_running and time.monotonic() < end:
            await pilot.pause(0.05)
    opening.close()
    assert app.load_error is not None
    assert not opening.unused
    assert typed_in_file(opening.path) == "kept words"

    # Reopened on a model that loads: the provisional file binds to it.
    from loomterm.sessions.session import read_file

    again = SessionOpening(
        opening.path,
        EngineOptions(model=str(tiny_llama_dir), device="cpu"),
        read_file(opening.path),
    )
    app = LoomApp(again.preview(), session_name="failed", opening=again, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        assert app.doc.text == "kept words"  # on the screen before the model is there
        end = time.monotonic() + 300
        while time.monotonic() < end:
            await pilot.pause(0.05)
            if app.loader is None and not app.doc.dirty and not app.jobs.busy:
                break
        assert app.loader is None and not app.doc.dirty
        await pilot.press("ctrl+q")
    again.close()
    from loomterm.sessions.session import close_session

    close_session(app.loom)
    data = store.load(opening.path)
    assert data.path_text(data.cursor_node) == "kept words"
    assert data.typed is None  # the tree holds it: the file no longer keeps it apart
    assert data.model.get("fingerprint")  # bound to the model that loaded


def test_a_start_quit_with_nothing_typed_leaves_no_file(silent_server):
    opening = new_opening(silent_server, "empty")
    assert opening.path.exists()
    opening.close()
    assert opening.unused


async def test_typing_during_a_load_on_a_full_disk_goes_to_the_journal(
    tmpfs,  # noqa: F811
    monkeypatch,
):
    """The disk fills while the model loads: the status bar says the typing is not in
    the session file, it is kept in the journal, and the session shows it when read."""
    from loomterm.tui.app import LoomApp
    from tests.test_save_failures import fill

    data = tmpfs("data", "size=1m")
    monkeypatch.setenv("LOOMTERM_DATA_DIR", str(data))
    server = HangingServer()
    opening = new_opening(server.url, "full")
    filler = fill(data)
    app = LoomApp(opening.preview(), session_name="full", opening=opening, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "typed on a full disk")
        await pilot.pause(0.2)
        assert "NOT SAVED" in app.status.full_text
        assert "journal" in app.status.full_text
        await pilot.press("ctrl+q")
        while app.is_running:
            await pilot.pause(0.05)
    opening.close()
    server.drop()
    assert typed_in_file(opening.path) == "typed on a full disk"  # file + journal
    filler.unlink()
    from loomterm.store import SessionStore, journal

    SessionStore.open(opening.path).close()  # replayed into the file
    assert journal.journal_files(opening.path) == []
    assert typed_in_file(opening.path) == "typed on a full disk"


async def test_typing_in_a_read_only_session_while_it_loads_is_not_dropped_at_quit(
    silent_server,
):
    """A read-only session's typing is written nowhere: ctrl+q during the load says so
    and stays (the offer to save it as a new session needs the model); ctrl+q again
    leaves without it, and the file is as it was. The status bar says READ-ONLY from
    the start."""
    from loomterm.sessions.loading import read_file
    from loomterm.tui.app import LoomApp

    made = new_opening(silent_server, "kept")  # a session file on disk
    made.close()
    path = made.path
    before = path.read_bytes()
    opening = SessionOpening(
        path, EngineOptions(model=silent_server), read_file(path, read_only=True), read_only=True
    )
    app = LoomApp(opening.preview(), session_name="kept", opening=opening, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "read only words")
        await pilot.pause(0.2)
        assert app.loader is not None  # still connecting
        assert "READ-ONLY" in screen_text(app)
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
        assert app.is_running  # not dropped without a word
        notes = [n.message for n in app._notifications]  # noqa: SLF001 - as test_no_markup
        assert any("saved nowhere" in note for note in notes)
        await pilot.press("ctrl+q")
        start = time.monotonic()
        while app.is_running and time.monotonic() - start < 5:
            await pilot.pause(0.01)
        assert not app.is_running
    opening.close()
    assert path.read_bytes() == before


async def test_quitting_a_read_only_load_with_typing_offers_a_new_session_once_loaded(
    tiny_llama_dir,
):
    """ctrl+q while a read-only session's model loads, with text typed: once the model
    is there, the dialog offers to save the typing as a new session, and it is saved."""
    from loomterm.sessions.loading import read_file
    from loomterm.sessions.session import close_session, load_session
    from loomterm.tui.app import LoomApp
    from loomterm.tui.widgets.dialogs import SaveAsScreen

    options = EngineOptions(model=str(tiny_llama_dir), device="cpu")
    made = SessionOpening(session_path("kept-ro"), options)
    made.reserve()
    made.close()
    path = made.path
    before = path.read_bytes()
    opening = SessionOpening(path, options, read_file(path, read_only=True), read_only=True)
    app = LoomApp(opening.preview(), session_name="kept-ro", opening=opening, sync_delay=0.05)
    async with app.run_test(size=TERMINAL) as pilot:
        await type_text(pilot, "words to keep")
        await pilot.press("ctrl+q")
        end = time.monotonic() + 300  # importing torch first: long on a busy machine
        while not isinstance(app.screen, SaveAsScreen) and time.monotonic() < end:
            await pilot.pause(0.05)
        assert isinstance(app.screen, SaveAsScreen)
        await pilot.press("enter")  # the name offered
        end = time.monotonic() + 60
        while app.is_running and time.monotonic() < end:
            await pilot.pause(0.05)
        assert not app.is_running
    opening.close()
    if opening.loom is not None:
        close_session(opening.loom)
    assert path.read_bytes() == before
    saved = load_session(session_path("kept-ro-copy"))
    assert saved.path_text() == "words to keep"
