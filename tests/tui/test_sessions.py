"""Sessions: every change reaches the file as it happens; reopening resumes exactly."""

from __future__ import annotations

import argparse

import pytest

from loomterm.sessions.session import close_session, open_loom, save_loom
from tests.tui.conftest import TERMINAL, paste, settle, type_text
from tests.tui.screen_text import screen_text


async def test_reopening_resumes_where_the_user_was(make_app, loom, tiny_llama_dir, tmp_path):
    path = tmp_path / "story.loom"
    save_loom(loom, path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await paste(pilot, "Once upon a time")
        await pilot.press("ctrl+n")
        await settle(pilot)
        await pilot.press("alt+right")
        await settle(pilot)
        await pilot.press("alt+s")
        await settle(pilot)
        await type_text(pilot, "!")
        await pilot.press("ctrl+q")
        await pilot.pause(0.5)
    where = loom.text(loom.cursor)
    nodes = len(loom.tree.nodes)
    close_session(loom)

    again = open_loom(path, model=str(tiny_llama_dir), device="cpu")
    try:
        assert again.text(again.cursor) == where
        assert where.endswith("!")
        assert len(again.tree.nodes) == nodes
        assert any(node.meta.get("bookmark") for node in again.tree.nodes.values())
        app2 = make_app(target_loom=again)
        async with app2.run_test(size=TERMINAL) as pilot:
            await pilot.pause()
            assert app2.doc.text == where
            assert "Once upon a time" in screen_text(app2)
    finally:
        close_session(again)


async def test_settings_and_archive_flags_are_saved(make_app, loom, tiny_llama_dir, tmp_path):
    path = tmp_path / "flags.loom"
    stem = loom.append(loom.root, "Once upon a time")
    loom.append(stem, " a cat")
    dog = loom.append(stem, " a dog")
    loom.cursor = dog
    save_loom(loom, path)
    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        await pilot.press("alt+h")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        app.loom.update_settings(temperature=0.5, splice_mode="exact")
        await pilot.press("ctrl+q")
        await pilot.pause(0.3)
    close_session(loom)
    again = open_loom(path, model=str(tiny_llama_dir), device="cpu")
    try:
        hidden = [n for n in again.tree.nodes.values() if n.meta.get("hidden")]
        assert len(hidden) == 1 and again.text(hidden[0]).endswith("a dog")
        assert again.settings.temperature == 0.5
        assert again.settings.splice_mode == "exact"
    finally:
        close_session(again)


def _args(**kw):
    defaults = dict(model=None, device="cpu", dtype="auto", n_ctx=None, session=None, prompt=None)
    defaults.update(kw)
    return argparse.Namespace(**defaults)


def test_cli_opens_or_creates_sessions(tiny_llama_dir, monkeypatch):
    from loomterm.cli import run as cli_run

    monkeypatch.setattr(cli_run, "require_terminal", lambda: None)
    loom, name = cli_run.open_session(_args(model=str(tiny_llama_dir), session="tale"))
    assert name == "tale"
    loom.append(loom.root, "kept")
    close_session(loom)
    # Bare loomterm: the most recent session.
    loom, name = cli_run.open_session(_args(model=str(tiny_llama_dir)))
    try:
        assert name == "tale" and loom.text(loom.root.children[0]) == "kept"
    finally:
        close_session(loom)


def test_cli_without_a_terminal_is_one_line_and_writes_nothing(tiny_llama_dir, capsys):
    from loomterm.cli import main
    from loomterm.config.locations import sessions_dir

    assert main(["--model", str(tiny_llama_dir), "-s", "never"]) == 1
    _, err = capsys.readouterr()
    assert err.strip().splitlines()[-1] == (
        "loomterm: the editor needs a terminal; use --prompt TEXT for a one-shot completion"
    )
    assert not (sessions_dir() / "never.loom").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "./no/such/model", "-s", "x"], "no such model"),
        (["-s", "ghost", "--device", "tpu9"], ""),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys):
    from loomterm.cli import main

    assert main(argv) == 1
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("loomterm:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert message in lines[0]
