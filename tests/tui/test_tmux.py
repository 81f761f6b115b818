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
        run = f"env -u COLUMNS -u LINES {env} TERM=xterm-256color " + " ".join(command)
        line = f"sh -c '{run}; echo $? > {self.status_file}; sleep 600'"
        size = ["-x", str(WIDTH), "-y", str(HEIGHT)]
        self.tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "t", *size, "-c", str(self.cwd), line
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

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


def idle(screen: str) -> bool:
    return (
        "^g" in screen
        and "generating" not in screen
        and "working" not in screen
        and "edited" not in screen
    )


@pytest.fixture
def tmux_run(tmp_path, isolated_dirs):
    command = loomterm_command()
    require_or_skip(command, "the loomterm command is not installed (pip install -e .)")
    env = {
        "LOOMTERM_DATA_DIR": os.environ["LOOMTERM_DATA_DIR"],
        "LOOMTERM_CONFIG_DIR": os.environ["LOOMTERM_CONFIG_DIR"],
        "LOOMTERM_CACHE_DIR": os.environ["LOOMTERM_CACHE_DIR"],
    }
    sessions: list[Tmux] = []

    def run(args: list[str]) -> Tmux:
        tmux = Tmux(f"loomterm-test-{os.getpid()}-{len(sessions)}", tmp_path, env)
        sessions.append(tmux)
        tmux.start([command, *args])
        return tmux

    yield run
    for tmux in sessions:
        tmux.kill()


def test_the_installed_command_in_a_real_terminal(tmux_run, tiny_llama_dir, tmp_path):
    args = ["--model", str(tiny_llama_dir), "--device", "cpu", "-s", "story"]
    term = tmux_run(args)
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")

    # Type, then generate from the end.
    term.keys("Once upon a time", literal=True)
    term.wait_for(lambda s: "Once upon a time" in s and idle(s), what="the typing to sync")
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
    assert second_text[0].startswith("Once upon")
    assert not second_text[0].startswith("Once upon a time")

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

    # Export as Markdown into the working folder, then quit.
    term.keys("C-e")
    term.wait_for(lambda s: "Export" in s and "story.md" in s, what="the export dialog")
    term.keys("Enter")
    exported = tmp_path / "story.md"
    deadline = time.monotonic() + 30
    while not exported.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert exported.exists(), term.screen()
    term.keys("C-q")
    assert term.exit_status() == "0"
    body = exported.read_text(encoding="utf-8")
    assert "Once upon a time" in body and "# story" in body

    # Reopen: bare loomterm resumes the most recent session where it was.
    again = tmux_run(["--model", str(tiny_llama_dir), "--device", "cpu"])
    screen = again.wait_for(lambda s: "^g" in s and "tok" in s and idle(s), what="reopening")
    assert document_lines(screen) == first_text
    assert "[2]" in screen  # the branch point is still there
    assert "\u2605" in screen  # and the bookmark
    again.keys("C-q")
    assert again.exit_status() == "0"
