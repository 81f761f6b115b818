"""Weave through a real terminal: alt+e as ESC e, the dialog, the status bar, escape."""

from __future__ import annotations

import time

from tests.tui.test_tmux import idle, needs_tmux  # noqa: F401 - a fixture


def test_weave_in_a_real_terminal_and_escape_keeps_what_it_made(tmux_run, tiny_llama_dir):  # noqa: F811
    from loomterm.engine import Loom
    from loomterm.sessions.session import Session, load_session, session_path

    # The weave is unseeded in the editor: a tiny model's end-of-text could end every
    # level-1 branch (never expanded), and level 2 would never show. Never end.
    loom = Loom.load(str(tiny_llama_dir), device="cpu")
    loom.update_settings(logit_bias={str(eos): "never" for eos in loom.eos_ids})
    path = session_path("woven")
    path.parent.mkdir(parents=True, exist_ok=True)
    Session.create(loom, path).close()
    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "woven"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    term.keys("Once upon a time", literal=True)
    term.wait_for(lambda s: "Once upon a time" in s and idle(s), what="the typing to sync")

    term.keys("M-e")  # the terminal sends ESC e
    term.wait_for(lambda s: "Weave from the caret" in s, what="the weave dialog")
    assert "Once upon a timee" not in term.screen()  # the "e" was not typed
    term.keys("Tab", "Tab", "Tab", "BSpace", "BSpace")  # tokens per node: 16 -> 400
    term.keys("400", literal=True)
    term.keys("Enter")
    # The status bar counts as it goes (the screen never holds still meanwhile).
    seen, end = "", time.monotonic() + 180  # level 1 takes long on a loaded machine
    while time.monotonic() < end and "weave level 2/3" not in seen:
        seen = term.screen()
        time.sleep(0.1)
    assert "weave level 2/3" in seen and "nodes" in seen and "esc stops" in seen, seen
    term.keys("Escape")
    screen = term.wait_for(
        lambda s: idle(s) and "weave level" not in s and "Weave stopped" in s,
        what="the weave to stop",
    )
    assert "Weave stopped" in screen
    term.keys("C-q")
    assert term.exit_status() == "0"

    data = load_session(session_path("woven"))
    woven = [n for n in data.tree.nodes.values() if "weave" in n.meta]
    assert 4 < len(woven) < 20  # level 1 whole, then stopped in level 2
    assert "weave" in data.cursor_node.meta  # the document stood on the best branch


def field(screen: str, label: str) -> str | None:
    """The value shown right of ``label`` in a dialog drawn on ``screen``."""
    for line in screen.splitlines():
        if label in line:
            return line.split(label, 1)[1].strip(" \u2588")
    return None


def test_a_burst_in_the_weave_dialog_reaches_the_fields_it_was_typed_for(tmux_run, tiny_llama_dir):  # noqa: F811
    """Tab, backspace, arrows and digits sent in one write, ten times over: each lands in
    the field it was typed for, in order (Textual's own tab and backspace used to land
    late: 5 bursts in 40 went to another field)."""
    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "burst"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    labels = ("Children per node (n)", "Depth (levels)", "Kept per level (k)", "Tokens per node")
    # tokens: "16" selected on focus, erased, "400", two left, erase the 4, "1" -> "100";
    # shift+tab to kept per level: "2" selected, "3".
    burst = ["Tab", "Tab", "Tab", "BSpace", "4", "0", "0", "Left", "Left", "BSpace", "1"]
    burst += ["BTab", "3"]
    for _ in range(10):
        term.keys("M-e")
        term.wait_for(lambda s: "Weave from the caret" in s, what="the weave dialog")
        term.keys(*burst)
        screen = term.wait_for(lambda s: field(s, labels[3]) == "100", timeout=10, what="the burst")
        assert [field(screen, label) for label in labels] == ["4", "3", "3", "100"]
        term.keys("Escape")
        term.wait_for(lambda s: "Weave from the caret" not in s, what="the dialog to close")
    term.keys("C-q")
    assert term.exit_status() == "0"
