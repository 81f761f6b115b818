"""Several models through a real terminal: ``loomterm --attach`` starts the editor with a
second model, the session reopened with it attached and active again, and, its folder
gone, a one-line notice on the editor's screen (the installed command in tmux)."""

from __future__ import annotations

import shutil

from tests.tui.test_tmux import idle


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
