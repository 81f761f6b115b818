"""Fixtures for the editor's tests: the real engine on the tiny seeded Llama.

The model is loaded once per test session; each test gets a fresh Loom (its own tree
and working cache) on it, greedy and short so runs are fast and repeatable.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import require_or_skip

TERMINAL = (100, 30)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_llama_dir):
    from loomterm.engine.models.load import load_model

    return load_model(str(tiny_llama_dir))


@pytest.fixture
def loom(tiny_loaded):
    from loomterm.engine import Loom

    loom = Loom.from_loaded(tiny_loaded, n_ctx=512)
    # Thinking ahead (on by default on a local model) is tested on its own: elsewhere
    # it would add work and status marks at every pause. So is token healing (on by
    # default; test_healing.py, test_tmux_gemma.py): elsewhere every generation from a
    # typed word's end would split the typed node and change the trees tests count.
    loom.update_settings(
        temperature=0.0, max_new_tokens=12, n=3, think_ahead="off", token_healing="off"
    )
    return loom


@pytest.fixture
def make_app(loom, tmp_path):
    """Build the app on the test's loom; exports go under the test's folder."""
    from loomterm.tui.app import LoomApp

    def make(target_loom=None, **kwargs):
        kwargs.setdefault("show_speed", False)
        kwargs.setdefault("sync_delay", 0.05)
        kwargs.setdefault("export_dir", tmp_path)
        kwargs.setdefault("session_name", "story")
        return LoomApp(target_loom or loom, **kwargs)

    return make


def _quiet(app) -> bool:
    """No job in flight, nothing deferred, no pending typing, and no pending redraw of
    the branch pane or the status bar (their timers have fired)."""
    return (
        not app.jobs.busy
        and not app.search.busy  # a search on its thread (ctrl+f, alt+n)
        and not app.jobs.deferred
        and not app.doc.dirty
        and app.typing.timer is None
        and app.panes.tree_timer is None
        and app.status_line.timer is None
    )


async def settle(pilot, timeout: float = 20.0) -> None:
    """Wait until the app is quiet twice in a row, a short pause apart (a timer that
    fires may start a job or another timer). State, not a fixed wait: a loaded machine
    only makes it slower."""
    app = pilot.app
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        await pilot.pause(0.02)
        if _quiet(app):
            await pilot.pause(0.05)
            if _quiet(app):
                return
    raise AssertionError("the app did not settle")


async def type_text(pilot, text: str) -> None:
    """Type ``text`` key by key (newlines as enter)."""
    keys = ["enter" if ch == "\n" else ("space" if ch == " " else ch) for ch in text]
    await pilot.press(*keys)


@pytest.fixture
def exports(tmp_path) -> Path:
    return tmp_path


async def paste(pilot, text: str) -> None:
    """Paste ``text`` into the document (one event: much faster than typing it)."""
    from textual import events

    pilot.app.view.post_message(events.Paste(text))
    await pilot.pause()


async def write_and_generate(pilot, text: str = "Once upon a time", timeout: float = 20.0) -> None:
    """Paste a prompt and generate from its end."""
    await paste(pilot, text)
    await pilot.press("ctrl+g")
    await settle(pilot, timeout=timeout)


@pytest.fixture
def tmux_run(tmp_path, isolated_dirs):
    """Start the installed command in a tmux session per call (killed afterwards), with
    the test's folders and ``PYTHONPATH`` (a checkout run in place) passed on."""
    from tests.tui.test_tmux import Tmux, loomterm_command

    require_or_skip(shutil.which("tmux"), "tmux is not installed")
    command = loomterm_command()
    require_or_skip(command, "the loomterm command is not installed (pip install -e .)")
    names = (
        "LOOMTERM_DATA_DIR",
        "LOOMTERM_CONFIG_DIR",
        "LOOMTERM_CACHE_DIR",
        "LOOMTERM_DOCUMENTS_DIR",
        "PYTHONPATH",
    )
    env = {name: os.environ[name] for name in names if os.environ.get(name)}
    if "PYTHONPATH" in env:  # the pane runs in another folder: absolute entries
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
    sessions: list = []

    def run(args: list[str], extra_env: dict[str, str] | None = None):
        tmux = Tmux(
            f"loomterm-test-{os.getpid()}-{len(sessions)}", tmp_path, {**env, **(extra_env or {})}
        )
        sessions.append(tmux)
        tmux.start([command, *args])
        return tmux

    yield run
    for tmux in sessions:
        tmux.kill()
