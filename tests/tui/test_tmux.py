"""The real thing: the installed ``loomterm`` command in tmux, driven by keys.

It types, generates, branches from the middle, switches siblings, undoes, exports and
quits; then reopens the session and checks the screen (``capture-pane``) and the file.
Skipped when tmux or the installed command is missing (failed instead under
``LOOMTERM_REQUIRE_ALL_TESTS=1``, as in CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loomterm.config.locations import documents_dir
from tests.helpers import require_or_skip


@pytest.fixture(autouse=True)
def needs_tmux():
    require_or_skip(shutil.which("tmux"), "tmux is not installed")


WIDTH, HEIGHT = 100, 30


def loomterm_command() -> str | None:
    beside = Path(sys.executable).with_name("loomterm")
    if beside.exists():
        return str(beside)
    return shutil.which("loomterm")


class Tmux:
    """One tmux server (its own socket) running one pane."""

    command = ""  # the loomterm command a fixture starts panes with (``loomterm_command``)

    def __init__(self, socket: str, cwd: Path, env: dict[str, str]) -> None:
        self.socket = socket
        self.cwd = cwd
        self.env = env
        self.status_file = cwd / f"{socket}.status"

    def tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        )
        return result.stdout

    def start(self, command: list[str]) -> None:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        # -u: a COLUMNS/LINES inherited from the test runner would override the pane size.
        # The exit status goes to a file: tmux does not always report a dead pane's.
        # TERM first: a test may ask for another terminal (its env names TERM).
        run = f"env -u COLUMNS -u LINES TERM=xterm-256color {env} " + " ".join(command)
        line = f"sh -c '{run}; echo $? > {self.status_file}; sleep 600'"
        size = ["-x", str(WIDTH), "-y", str(HEIGHT)]
        self.tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "t", *size, "-c", str(self.cwd), line
        )

    def screen(self, escapes: bool = False) -> str:
        """The pane's text; with ``escapes``, with its attributes and colours (SGR)."""
        return self.tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "t")

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", "t", *(["-l"] if literal else []), *keys)

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "") -> str:
        """The screen once ``predicate`` holds for it and it stopped changing."""
        end = time.monotonic() + timeout
        screen = previous = ""
        while time.monotonic() < end:
            screen = self.screen()
            if predicate(screen) and screen == previous:
                return screen
            previous = screen
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}; the screen was:\n{screen}")

    def exit_status(self, timeout: float = 60.0) -> str:
        """The command's exit status, once it has exited."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.status_file.exists() and self.status_file.read_text().strip():
                return self.status_file.read_text().strip()
            time.sleep(0.2)
        raise AssertionError(f"the command did not exit; the screen was:\n{self.screen()}")

    def paste(self, data: bytes) -> None:
        """Paste ``data`` as a terminal does: bracketed (``-p``), line feeds sent as CR
        (tmux's default separator), every other byte as it is."""
        buffer = self.cwd / f"{self.socket}.paste"
        buffer.write_bytes(data)
        self.tmux("load-buffer", "-b", "p", str(buffer))
        self.tmux("paste-buffer", "-p", "-d", "-b", "p", "-t", "t")

    def kill(self) -> None:
        socket = self.tmux("display-message", "-p", "#{socket_path}").strip()
        self.tmux("kill-server")
        if socket:
            Path(socket).unlink(missing_ok=True)


def document_lines(screen: str) -> list[str]:
    """The document pane's text (right of the branch pane), without the bars."""
    lines = []
    for line in screen.splitlines()[: HEIGHT - 2]:
        _, _, right = line.partition("\u2595")
        lines.append(right.strip())
    # Notifications (toasts) draw over the bottom right corner: leave them out.
    return [line for line in lines if line and not line.startswith("\u258c")]


def bars(screen: str) -> str:
    """The status bar and the footer (the pane's last two lines): the words that say
    what the editor is doing are read there only, since the document and the branch
    pane hold model text, which may say "working" or "edited" as well."""
    return "\n".join(screen.splitlines()[HEIGHT - 2 :])


def idle(screen: str) -> bool:
    state = bars(screen)
    return (
        "^g" in state
        and "generating" not in state
        and "working" not in state
        and "edited" not in state
        and "model loading" not in state  # the editor is up; its model not yet
    )


def test_the_installed_command_in_a_real_terminal(tmux_run, tiny_llama_dir, tmp_path):
    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "story"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")

    # Type, then generate from the end (after a full stop: token healing has no word to
    # back up there; from the middle below, the tiny model's guess decides whether auto
    # heals " upon", and either way the new branch starts "Once upon").
    term.keys("Once upon a time.", literal=True)
    term.wait_for(lambda s: "Once upon a time." in s and idle(s), what="the typing to sync")
    term.keys("C-g")
    after_first = term.wait_for(lambda s: idle(s) and "2 nodes" in s, what="the first generation")
    first_text = document_lines(after_first)

    # Generate from the middle: a new branch after "Once upon".
    term.keys("C-Home", *["Right"] * 9)
    term.keys("C-g")
    after_second = term.wait_for(
        lambda s: idle(s) and document_lines(s) != first_text and "[2]" in s,
        what="the branch from the middle",
    )
    second_text = document_lines(after_second)
    # A wrapped line breaks at a space: the tiny model's text may glue itself to "upon".
    second_start = " ".join(second_text)
    assert second_start.startswith("Once upon")
    assert not second_start.startswith("Once upon a time")

    # Switch siblings: back to the first branch, and forth again.
    term.keys("M-Left")
    term.wait_for(lambda s: document_lines(s) == first_text, what="the previous sibling")
    term.keys("M-Right")
    term.wait_for(lambda s: document_lines(s) == second_text, what="the next sibling")

    # Undo goes back to where the document was before the switch.
    term.keys("C-z")
    term.wait_for(lambda s: document_lines(s) == first_text, what="undo")

    # An alt key through a real terminal (ESC s): bookmark this branch.
    term.keys("M-s")
    term.wait_for(lambda s: "\u2605" in s, what="the bookmark star")
    assert document_lines(term.screen()) == first_text  # the "s" was not typed

    # Export as Markdown into the documents folder, then quit.
    term.keys("C-e")
    term.wait_for(lambda s: "Export" in s and "Format" in s, what="the export dialog")
    term.keys("C-s")  # the dialog opens on the format list: ctrl+s exports
    exported = documents_dir() / "story.md"
    deadline = time.monotonic() + 30
    while not exported.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert exported.exists(), term.screen()
    term.keys("C-q")
    assert term.exit_status() == "0"
    body = exported.read_text(encoding="utf-8")
    # The text as prose, the bookmark listed after it.
    assert "\n\nOnce upon a time" in body and "# story" in body
    assert "## Bookmarks" in body and "bookmarked, node" in body

    # Reopen: bare loomterm resumes the most recent session where it was.
    again = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu"])
    screen = again.wait_for(lambda s: "^g" in s and "tok" in s and idle(s), what="reopening")
    assert document_lines(screen) == first_text
    assert "[2]" in screen  # the branch point is still there
    assert "\u2605" in screen  # and the bookmark
    again.keys("C-q")
    assert again.exit_status() == "0"


def test_pastes_arrive_whole_in_order_and_never_as_keys(tmux_run, tiny_llama_dir):
    """Real bytes through a real terminal: a line break (sent as CR), an escape
    sequence, and BEL (ctrl+g), TAB, \\x01 and an OSC sequence, which must neither
    reorder the text nor run a binding."""
    from loomterm.sessions.session import load_session, session_path
    from loomterm.tree import Origin

    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "pasted"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")

    term.paste(b"First line.\nSecond line.\n")
    term.wait_for(lambda s: idle(s) and "Second line." in s, what="the two-line paste")
    term.paste(b" CCC\x1b[31mDDD\x1b[0m EEE\n")
    term.wait_for(lambda s: idle(s) and "EEE" in s, what="the paste with colour codes")
    term.paste(b"bel\x07 tab\t soh\x01 osc\x1b]0;title\x07 end")
    screen = term.wait_for(lambda s: idle(s) and " end" in s, what="the paste with controls")
    lines = document_lines(screen)
    assert lines[:4] == [
        "First line.",
        "Second line.",
        "CCC\u241b[31mDDD\u241b[0m EEE",
        "bel\u2407 tab     soh\u2401 osc\u241b]0;title\u2407 end",
    ], screen
    term.keys("C-q")
    assert term.exit_status() == "0"
    data = load_session(session_path("pasted"))
    assert all(node.origin is not Origin.MODEL for node in data.tree.nodes.values())  # no ^g
    text = data.path_text()
    assert text == (
        "First line.\nSecond line.\n CCC\x1b[31mDDD\x1b[0m EEE\n"
        "bel\x07 tab\t soh\x01 osc\x1b]0;title\x07 end"
    )


def test_after_kill_dash_nine_mid_generation_it_reopens_at_the_written_text(
    tmux_run, tiny_llama_dir, tiny_loaded
):
    """The cursor is saved as generation starts writing, so a reopened session shows
    the text that reached the file, not the place before it."""
    import signal

    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, load_session, save_loom, session_path

    loom = Loom.from_loaded(tiny_loaded)
    # Healing off (kept with the session): this prompt's plain continuation runs on for
    # minutes on the tiny model, a healed one may end within a second.
    loom.update_settings(max_new_tokens=100_000, temperature=0.0, token_healing="off")
    path = session_path("crash")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    close_session(loom)

    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "crash"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    term.paste(b"Once upon a time")
    term.wait_for(lambda s: idle(s) and "Once upon a time" in s, what="the prompt")
    term.keys("C-g")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the screen changes all along: no wait_for
        screen = term.screen()
        if "generating" in bars(screen) and len(" ".join(document_lines(screen))) > 200:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"no generation to kill; the screen was:\n{screen}")
    time.sleep(1.0)  # past the half-second flush
    shell = int(term.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip())
    children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
    os.kill(int(children[0]), signal.SIGKILL)
    term.exit_status()

    saved = load_session(path)
    written = saved.path_text()
    assert saved.cursor_node.origin.name == "MODEL"
    assert written.startswith("Once upon a time") and len(written) > 100

    again = tmux_run(args)
    screen = again.wait_for(lambda s: idle(s) and "tok" in s, what="reopening")
    from loomterm.tui.sanitize import safe

    def squeezed(text: str) -> str:
        return "".join(text.split())

    tail = squeezed(safe(written.replace("\n", " ")))[-16:]  # shown as the screen shows it
    assert tail in squeezed("".join(document_lines(screen))), screen
    again.keys("C-q")
    assert again.exit_status() == "0"


def test_a_bare_start_quit_at_once_leaves_no_session_and_ctrl_o_lists_them(
    tmux_run, tiny_llama_dir
):
    from loomterm.config.locations import sessions_dir

    model = ["--model", str(tiny_llama_dir), "--device", "cpu"]
    term = tmux_run(model)
    screen = term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    assert "Type, then press ctrl+g" in screen  # how to start, on the first screen
    term.keys("C-q")
    assert term.exit_status() == "0"
    assert not list(sessions_dir().glob("*.loom"))  # nothing written: nothing kept

    term = tmux_run([*model, "-s", "kept"])
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the named session")
    term.paste(b"Some text")
    term.wait_for(lambda s: idle(s) and "Some text" in s, what="the text to sync")
    term.keys("C-o")
    screen = term.wait_for(lambda s: "Sessions" in s and "Last change" in s, what="the picker")
    row = next(line for line in screen.splitlines() if " kept " in line)
    assert "\u25cf" in row and "tiny-llama" in row and "KiB" in row
    term.keys("Escape")
    term.keys("C-q")
    assert term.exit_status() == "0"
    assert [p.name for p in sessions_dir().glob("*.loom")] == ["kept.loom"]


def test_search_ratings_and_a_split_through_a_real_terminal(tmux_run, tiny_llama_dir):
    """ctrl+f, alt+n and alt+shift+n, alt+g and alt+k as a terminal sends them; the rating and
    the split are in the session file afterwards."""
    from loomterm.sessions.session import close_session, load_session, save_loom, session_path
    from tests.helpers import make_loom

    loom = make_loom(tiny_llama_dir)
    save_loom(loom, session_path("tools"))
    stem = loom.append(loom.root, "Once upon a time")
    cat = loom.append(stem, " there was a cat")
    dog = loom.append(stem, " there was a dog")
    loom.cursor = dog
    close_session(loom)

    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "tools"])
    term.wait_for(lambda s: idle(s) and "there was a dog" in s, what="the editor to start")
    term.keys("C-f")
    term.wait_for(lambda s: "Search every branch" in s, what="the search dialog")
    term.keys("there was a", literal=True)
    term.wait_for(lambda s: "2 hits in 3 nodes" in s, what="the hits")
    term.keys("M-r")  # ESC r: regular expressions on, not an "r" in the query
    term.keys(r" \w+", literal=True)
    term.wait_for(
        lambda s: "there was a \\w+" in s and "2 hits in 3 nodes" in s, what="alt+r, a regex"
    )
    term.keys("Enter")
    term.wait_for(
        lambda s: idle(s) and "there was a cat" in " ".join(document_lines(s)), what="the hit"
    )
    term.keys("M-n")
    term.wait_for(lambda s: "there was a dog" in " ".join(document_lines(s)), what="alt+n")
    term.keys("M-N")
    term.wait_for(lambda s: "there was a cat" in " ".join(document_lines(s)), what="alt+shift+n")
    term.keys("M-g")
    term.wait_for(lambda s: "\u2713 there was a cat" in s, what="the good mark")
    term.keys("End", *["Left"] * 4)  # before " cat"
    term.keys("M-k")
    term.wait_for(lambda s: idle(s) and "Split done" in s, what="the split")
    assert document_lines(term.screen())[0] == "Once upon a time there was a cat"
    term.keys("C-q")
    assert term.exit_status() == "0"
    data = load_session(session_path("tools"))
    saved_cat = data.tree.nodes[cat.id]
    assert data.text(saved_cat) == " cat" and data.text(saved_cat.parent) == " there was a"
    assert saved_cat.parent.meta.get("rating") == 1 or saved_cat.meta.get("rating") == 1


def test_renaming_the_open_session_leaves_no_trace_of_the_old_name(tmux_run, tiny_llama_dir):
    """Rename the open session in the picker: the toast, the words left on the terminal
    at quit and the session folder all know it by its new name only."""
    from loomterm.config.locations import data_dir

    term = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "story"])
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    term.keys("Once upon a time", literal=True)
    term.wait_for(lambda s: "Once upon a time" in s and idle(s), what="the typing to sync")
    term.keys("C-o")
    term.wait_for(lambda s: "Sessions" in s and "rename" in s, what="the session picker")
    term.keys("r")
    term.wait_for(lambda s: "Rename" in s, what="the rename dialog")
    term.keys("C-u")
    term.keys("tale", literal=True)
    term.keys("Enter")
    toast = term.wait_for(lambda s: "Now in session 'tale'" in s, what="the rename")
    assert "'story'" not in toast  # no "back to previous session" to itself
    term.keys("C-q")
    assert term.exit_status() == "0"
    screen = term.screen()
    assert "tale.loom" in screen.strip().splitlines()[-1]  # the last word at quit
    folder = data_dir() / "sessions"
    assert sorted(p.name for p in folder.iterdir()) == [".tale.loom.lock", "tale.loom"]
