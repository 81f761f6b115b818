"""Fuzzing the editor: thousands of random keys, pastes and clicks through Pilot, on the
real engine with the tiny seeded model, many of them while a generation runs.

Invariants:
- no unhandled exception (``run_test`` would re-raise it) and no job failing with
  anything but a user-facing ``LoomError``; the engine worker never stops;
- nothing on screen holds a raw control character;
- at the end, once the typing is synced, the document reads what the engine's cursor
  reads, and the session file (reopened read-only) holds the same tree and cursor.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import unicodedata

import pytest
from textual import events
from textual.errors import NoWidget
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

from loomterm.errors import LoomError
from loomterm.sessions.session import close_session, save_loom, session_of
from loomterm.store import load
from loomterm.tui.app import LoomApp
from loomterm.tui.controllers.generation import Generation
from loomterm.tui.controllers.jobs import Jobs
from tests.tui.conftest import TERMINAL, settle
from tests.tui.screen_text import screen_text

SEEDS = (1, 2)
EVENTS_PER_SEED = int(os.environ.get("LOOMTERM_FUZZ_EVENTS", "1100"))  # 2,200 in all
MAX_LENGTH = 160  # keep the text well inside the tiny model's 512-token context

PRINTABLE = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:!?'\"-()[]{}")
MULTIBYTE = list("éüß日本語😀€ñ") + ["café 日本 😀"]
PASTES = [
    "café 日本 😀",
    "\x1b[31mred\x1b[0m",
    "bell\x07",
    "cr\r",
    "line\r\nnext",
    "tab\tstop",
    "\u202eevil\u202c",
    "\x00nul\x7fdel",
    "\x1b]0;title\x07",
    "\x1bP+q\x1b\\",
    " once upon a time",
    "\n\n",
    "😀😀",
]
KEYS = [
    "backspace",
    "delete",
    "left",
    "right",
    "up",
    "down",
    "ctrl+left",
    "ctrl+right",
    "home",
    "end",
    "ctrl+home",
    "ctrl+end",
    "enter",
    "pageup",
    "pagedown",
]
COMMANDS = [
    "ctrl+g",
    "escape",
    "ctrl+r",
    "alt+left",
    "alt+right",
    "alt+up",
    "alt+down",
    "ctrl+z",
    "ctrl+y",
    "f5",
    "f6",
    "f7",
    "ctrl+t",
]


class FuzzApp(LoomApp):
    """The editor, recording every failed job and error notification."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.job_failures: list[tuple[str, BaseException]] = []
        self.errors: list[str] = []
        self.generations = 0

    def on_generation_started(self, message: Generation.Started) -> None:  # and LoomApp's
        self.generations += 1

    def on_jobs_failed(self, message: Jobs.Failed) -> None:  # LoomApp's handler runs too
        self.job_failures.append((message.label, message.error))

    def notify(self, message, *args, **kwargs) -> None:
        if kwargs.get("severity") == "error":
            self.errors.append(str(message))
        super().notify(message, *args, **kwargs)


def _no_raw_controls(app: LoomApp) -> None:
    text = screen_text(app)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    view = app.view
    for y in range(view.size.height):
        for seg in view.render_line(y):
            assert all(ch.isprintable() for ch in seg.text), repr(seg.text)


def _whole(text: str) -> str:
    return text.rstrip("\ufffd")


def _stored_text(data, node_id: int) -> str:
    """A node's whole text as the session file holds it."""
    node = data.tree.nodes[node_id]
    return "".join("".join(data.pieces.get(n.id, [])) for n in node.path())


def _key_event(key: str) -> events.Key:
    """The key event Pilot would send for ``key`` (Pilot's ``press`` then waits for the
    whole process to go idle, which with the model busy in its thread takes ~70 ms a
    key; sending straight to the driver types in bursts, as a fast typist would)."""
    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    try:
        char = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


async def _fuzz(pilot, app: FuzzApp, rng: random.Random, count: int) -> tuple[int, int]:
    """Send ``count`` random events; returns (events sent, events sent mid-generation)."""
    sent = during = 0

    async def press(*keys: str) -> None:
        nonlocal sent, during
        for key in keys:
            app._driver.send_message(_key_event(key))  # noqa: SLF001
            sent += 1
            during += app.generating
            await asyncio.sleep(0)

    async def paste(text: str) -> None:
        nonlocal sent, during
        app.view.post_message(events.Paste(text))
        sent += 1
        during += app.generating
        await asyncio.sleep(0)

    checked = 0
    while sent < count:
        if len(app.screen_stack) > 1:  # a dialog (alternatives) opened: close it
            await press("escape")
            await pilot.pause(0.02)
            continue
        roll = rng.random()
        if app.doc.length > MAX_LENGTH and roll < 0.5:
            await press(rng.choice(["ctrl+end", "ctrl+home"]), *["backspace", "delete"] * 10)
        elif roll < 0.06:  # generate, and keep going while it runs
            await press("ctrl+g")
            await pilot.pause(rng.choice([0.0, 0.05, 0.2]))
        elif roll < 0.30:
            await press(rng.choice(PRINTABLE).replace(" ", "space"))
        elif roll < 0.36:
            await paste(rng.choice(MULTIBYTE))
        elif roll < 0.46:
            await paste(rng.choice(PASTES))
        elif roll < 0.70:
            await press(rng.choice(KEYS))
        elif roll < 0.90:
            await press(rng.choice(COMMANDS))
        elif app.screen is app.view.screen:  # not while a dialog is on its way in
            size = app.view.size
            offset = (rng.randrange(max(1, size.width)), rng.randrange(max(1, size.height)))
            try:
                await pilot.click(app.view, offset=offset)
            except NoWidget:  # the screen is between layouts (a dialog just closed):
                continue  # nothing is laid out there yet for the pilot to click
            during += app.generating
            sent += 1
        if rng.random() < 0.15:  # let the app (and sometimes the engine) catch up
            await pilot.pause(rng.choice([0.0, 0.0, 0.01, 0.1, 0.3]))
        if sent - checked >= 100:
            checked = sent
            await pilot.pause(0.01)
            _no_raw_controls(app)
    return sent, during


async def _settle(pilot, app: FuzzApp) -> None:
    try:
        await settle(pilot, timeout=20)
    except AssertionError:
        state = dict(
            jobs=app.jobs.in_flight,
            generating=app.generating,
            deferred=len(app.jobs.deferred),
            dirty=app.doc.dirty,
            sync_timer=app.typing.timer,
            failed_sync=app.typing.failed,
            locks=app.jobs.locks,
            doc=app.doc.text,
            engine=app.loom.text(app.loom.cursor),
            failures=app.job_failures,
            screens=app.screen_stack,
        )
        raise AssertionError(f"the app did not settle: {state}") from None


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_keys_pastes_and_clicks(seed, loom, tmp_path):
    loom.update_settings(max_new_tokens=24)
    path = tmp_path / "fuzz.loom"
    save_loom(loom, path)
    rng = random.Random(seed)
    app = FuzzApp(loom, show_speed=False, sync_delay=0.4, export_dir=tmp_path, session_name="fuzz")
    began = time.monotonic()
    async with app.run_test(size=TERMINAL) as pilot:
        sent, during = await _fuzz(pilot, app, rng, EVENTS_PER_SEED)
        fuzzed = time.monotonic() - began
        # Wind down: stop any generation, close dialogs, hand the last typing over.
        for _ in range(5):
            await pilot.press("escape")
        app.typing.sync_now()
        await _settle(pilot, app)
        _no_raw_controls(app)
        assert app.return_code is None  # still running: nothing made it exit
        worker_stopped = [e for e in app.errors if "engine worker stopped" in e]
        assert not worker_stopped, worker_stopped
        bugs = [(label, e) for label, e in app.job_failures if not isinstance(e, LoomError)]
        assert not bugs, bugs
        assert not app.doc.dirty
        cursor = loom.cursor
        assert app.doc.node is cursor
        assert app.doc.text == loom.text(cursor)
        session_of(loom).flush()
        data = load(path)  # read-only: no model, no lock
        assert data.cursor == cursor.id
        # The session's per-token pieces leave out the U+FFFD the engine's text adds
        # for a path ending inside a UTF-8 character; the tokens are checked below.
        assert _whole(_stored_text(data, data.cursor)) == _whole(app.doc.text)
        assert set(data.tree.nodes) == set(loom.tree.nodes)
        for node in loom.tree.nodes.values():
            stored = data.tree.nodes[node.id]
            assert list(stored.tokens) == list(node.tokens), node
            assert (stored.parent.id if stored.parent else None) == (
                node.parent.id if node.parent else None
            )
        print(
            f"seed {seed}: {sent} events ({during} during generation) in {fuzzed:.1f} s, "
            f"{app.generations} generations, {len(loom.tree.nodes)} nodes, {len(app.job_failures)} user-facing job errors: "
            f"{sorted({str(e)[:60] for _, e in app.job_failures})}"
        )
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
    assert app.return_code in (None, 0)
    close_session(loom)


# -- what the fuzzing found, pinned down -------------------------------------------------
def _byte_doc():
    """A path ending inside "é" (a token of its first byte), on a byte vocabulary."""
    from loomterm.tree import Origin, Tree
    from loomterm.tui.document import DocumentModel

    words = {256: b"Hello", 257: b" world", 258: b"\n", 259: b" caf\xc3"}
    tree = Tree()
    a = tree.add(tree.root, [256, 257, 258], Origin.USER)
    b = tree.add(a, [256, 259], Origin.MODEL)
    doc = DocumentModel(lambda t: words.get(t, bytes([t % 256])))
    doc.show(b)
    assert doc.text == "Hello world\nHello caf\ufffd"
    return tree, a, b, doc


def test_typing_after_a_partial_character_then_syncing_shows_it_once():
    tree, a, b, doc = _byte_doc()
    doc.move_to(doc.length)
    doc.insert("x")
    from loomterm.tree import Origin

    synced = tree.add(b, [ord("x")], Origin.USER)  # what the engine made of the typing
    doc.show(synced)
    # Was "caf\ufffd\ufffdx": the kept block kept its flushed U+FFFD.
    assert doc.text == "Hello world\nHello caf\ufffdx"


def test_deleting_the_partial_character_block_then_showing_another_branch():
    tree, a, b, doc = _byte_doc()
    doc.move_to(doc.length)
    for _ in range(len("Hello caf\ufffd")):
        doc.backspace()
    assert doc.text == "Hello world\n"
    from loomterm.tree import Origin

    other = tree.add(a, [257, 257], Origin.MODEL)
    doc.show(other)
    # Was "Hello world world world" (the "\n" cut as if it were the U+FFFD), or an
    # IndexError from the app when that block had no pieces.
    assert doc.text == "Hello world\n world world"
