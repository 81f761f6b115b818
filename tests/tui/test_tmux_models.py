"""Several models through a real terminal: ``loomterm --attach`` starts the editor with a
second model, the session reopened with it attached and active again, and, its folder
gone, a one-line notice on the editor's screen (the installed command in tmux)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import require_or_skip
from tests.tui.test_tmux import Tmux, idle, loomterm_command


@pytest.fixture
def tmux_run(tmp_path, isolated_dirs):
    """``test_tmux``'s runner, passing on ``PYTHONPATH`` too (a checkout run in place)."""
    require_or_skip(shutil.which("tmux"), "tmux is not installed")
    command = loomterm_command()
    require_or_skip(command, "the loomterm command is not installed (pip install -e .)")
    names = ("LOOMTERM_DATA_DIR", "LOOMTERM_CONFIG_DIR", "LOOMTERM_CACHE_DIR", "PYTHONPATH")
    env = {name: os.environ[name] for name in names if os.environ.get(name)}
    if "PYTHONPATH" in env:  # the pane runs in another folder: absolute entries
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
    sessions: list[Tmux] = []

    def run(args: list[str]) -> Tmux:
        tmux = Tmux(f"loomterm-models-{os.getpid()}-{len(sessions)}", tmp_path, env)
        sessions.append(tmux)
        tmux.start([command, *args])
        return tmux

    yield run
    for tmux in sessions:
        tmux.kill()


def legend(screen: str) -> str:
    return next((line for line in screen.splitlines() if "models " in line), "")


def test_attach_at_start_then_reopen_as_it_was(tmux_run, tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    gpt2 = shutil.copytree(tiny_gpt2_dir, tmp_path / "gpt2")
    model = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "pair"]
    term = tmux_run([*model, "--attach", f"g={gpt2}"])
    screen = term.wait_for(lambda s: "^g" in s and " g" in legend(s), what="the editor, two models")
    assert "(active)" in legend(screen) and "g (active)" not in legend(screen)
    term.keys("M-l")
    term.wait_for(lambda s: "g (active)" in legend(s), what="g to become active")
    term.paste(b"Once upon a time")
    term.wait_for(lambda s: idle(s) and "Once upon a time" in s, what="the text to sync")
    term.keys("C-g")
    term.wait_for(lambda s: idle(s) and "tok" in s, what="g to generate")
    term.keys("C-q")
    assert term.exit_status() == "0"

    term = tmux_run(model)  # no --attach: the session brings g back, active
    screen = term.wait_for(lambda s: "^g" in s and "g (active)" in legend(s), what="reopened")
    assert "recorded" not in legend(screen)
    term.keys("C-q")
    assert term.exit_status() == "0"

    shutil.rmtree(gpt2)
    term = tmux_run(model)
    screen = term.wait_for(
        lambda s: "^g" in s and "not re-attached" in s, what="the notice of g not coming back"
    )
    assert "g (recorded)" in legend(screen)
    term.keys("C-q")
    assert term.exit_status() == "0"
