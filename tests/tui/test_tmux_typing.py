"""Typing and pasting are lossless, through a real terminal at full speed.

Bursts of text, enters, backspaces and pastes (bracketed and not; LF, CRLF and CR line
breaks) go to the installed ``loomterm`` in tmux with no pause between them; the session
file's path text must then be what a plain text editor would hold. A second test types
with pauses mid-word and mid-line and checks that the tree holds no fragment siblings.
"""

from __future__ import annotations

import subprocess
import time

from tests.tui.test_tmux import idle

START = ["--device", "cpu"]


class PlainEditor:
    """What a plain text editor holds after the same input, caret at the end."""

    def __init__(self) -> None:
        self.text = ""

    def keys(self, *keys: str) -> None:
        for key in keys:
            if key == "Enter":
                self.text += "\n"
            elif key == "BSpace":
                self.text = self.text[:-1]
            else:
                self.text += key

    def paste(self, data: bytes, raw: bool) -> None:
        text = data.decode()
        if not raw:  # tmux's paste-buffer sends every LF as CR (its default separator)
            text = text.replace("\n", "\r")
        self.text += text.replace("\r\n", "\n").replace("\r", "\n")


def paste(term, data: bytes, bracketed: bool, raw: bool) -> None:
    """``paste-buffer``: bracketed with ``-p``; ``-r`` sends the bytes as they are."""
    buffer = term.cwd / f"{term.socket}.paste"
    buffer.write_bytes(data)
    term.tmux("load-buffer", "-b", "p", str(buffer))
    flags = (["-p"] if bracketed else []) + (["-r"] if raw else [])
    term.tmux("paste-buffer", *flags, "-d", "-b", "p", "-t", "t")


def saved_text(name: str) -> str:
    from loomterm.sessions.session import load_session, session_path

    return load_session(session_path(name)).path_text()


def quit_when_synced(term) -> None:
    time.sleep(1.0)  # past the sync delay: "edited" shows until the engine has the text
    term.wait_for(idle, what="the typing to sync")
    term.keys("C-q")
    assert term.exit_status() == "0"


def test_bursts_of_keys_and_pastes_reach_the_file_in_order(tmux_run, tiny_llama_dir):
    term = tmux_run(["--model", str(tiny_llama_dir), *START, "-s", "bursts"])
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    editor = PlainEditor()

    def keys(*items: str) -> None:
        term.keys(*items)  # one send-keys: the terminal gets them in one write
        editor.keys(*items)

    def pasted(data: bytes, bracketed: bool, raw: bool) -> None:
        paste(term, data, bracketed, raw)
        editor.paste(data, raw)

    keys(" one", "Enter", "two", "Enter", "three")
    pasted(b"Line one.\nLine two.\nLine three.", bracketed=False, raw=False)
    keys("Enter", "abc", "BSpace", "BSpace", "x,y", "Enter", "Enter", "z.")
    pasted(b"\r\nAlpha.\r\nBeta.\r\nGamma.", bracketed=True, raw=True)
    pasted(b"\r\nCR one.\rCR two.\r", bracketed=False, raw=True)
    keys("q,", "BSpace", "Enter", "end of", "Enter")
    pasted(b"Windows.\r\nline.\r\n", bracketed=False, raw=True)
    pasted(b"Unix.\nline.\n\nafter a blank line.", bracketed=True, raw=False)
    pasted(b"\nold Mac.\rline.", bracketed=True, raw=True)
    keys("Enter", "BSpace", "BSpace", "!", "Enter", "last; words")
    term.wait_for(lambda s: "last; words" in s and idle(s), what="the burst", timeout=90)
    quit_when_synced(term)
    assert saved_text("bursts") == editor.text
    assert "Alpha.\nBeta.\nGamma." in editor.text and "Windows.\nline.\n" in editor.text


def test_pauses_mid_word_leave_no_fragment_siblings(tmux_run, tiny_llama_dir):
    """Typing with pauses longer than the sync delay (each pause hands the text to the
    engine) ends as one node: no ``lo`` / ``long`` / ``longer road`` siblings, no
    ``⏎`` / ``⏎⏎``. Then text typed after a generation goes into one new node too."""
    from loomterm.sessions.session import load_session, session_path
    from loomterm.tree import Origin

    term = tmux_run(["--model", str(tiny_llama_dir), *START, "-s", "paused"])
    term.wait_for(lambda s: "^g" in s and "0 tok" in s, what="the editor to start")
    # It ends with a full stop: token healing (on by default) would split a last word.
    for chunk in [" The lo", "ng", "er road", "Enter", "Enter", "It was", "BSpace", "s", "."]:
        term.keys(chunk, literal=chunk not in ("Enter", "BSpace"))
        time.sleep(1.2)  # past the sync delay (0.4 s): the engine has the text each time
    term.wait_for(idle, what="the typing to sync")
    term.keys("C-g")
    term.wait_for(lambda s: idle(s) and "2 nodes" in s, what="the generation")
    for chunk in [" And", " then", " more"]:
        term.keys(chunk, literal=True)
        time.sleep(1.2)
    quit_when_synced(term)
    data = load_session(session_path("paused"))
    text = data.path_text()
    assert text.startswith(" The longer road\n\nIt was") and text.endswith(" And then more")
    typed = data.tree.root.children
    assert len(typed) == 1 and data.text(typed[0]) == " The longer road\n\nIt was."
    assert typed[0].origin is Origin.USER  # every pause retyped the one node in place
    assert data.text(data.cursor_node).endswith(" And then more")  # one node, 3 pauses
    # The typing after the generation may re-tokenize the generation's last few tokens
    # (a character the tiny model left unfinished, or a token that merges with the typed
    # text): then that short model tail stays beside the new branch, which starts with
    # the same text and holds the typing. Which tokens end the generation is the seeded
    # model's choice, so the test asserts the rule, not a token count.
    forks = [node for node in data.tree.nodes.values() if len(node.children) > 1]
    assert len(forks) <= 1
    for fork in forks:
        old, new = fork.children
        assert old.origin is Origin.MODEL and not old.children, data.text(old)
        assert len(old.tokens) <= 4, data.text(old)  # a character is at most 4 bytes
        assert new is data.cursor_node and data.text(new).startswith(data.text(old))


def pane_mode(term) -> set[str]:
    """The flags ``stty -a`` reads off the pane's terminal (``icrnl``, ``-echo``...)."""
    tty = term.tmux("display-message", "-p", "-t", "t", "#{pane_tty}").strip()
    return set(
        subprocess.run(["stty", "-F", tty, "-a"], capture_output=True, text=True).stdout.split()
    )


def test_keys_typed_before_the_editor_has_the_terminal_arrive_as_typed(tmux_run, tiny_llama_dir):
    """With the model loaded before the editor starts (``--retokenize``: seconds of
    torch and the model), a burst typed meanwhile (keys, enters, a bracketed and a raw
    CRLF paste) reaches the session as typed: the terminal stops turning CR into LF
    (and echoing) as soon as the editor's run begins (``tui.early_keys``), not only once
    Textual takes it. Afterwards the terminal is as it was."""
    term = tmux_run(["--model", str(tiny_llama_dir), *START, "--retokenize", "-s", "early"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the mode is switched, the editor not painted yet
        mode = pane_mode(term)
        if "-icrnl" in mode and "^p" not in term.screen():
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"the terminal kept its cooked mode: {mode}")
    assert {"-echo", "-icanon", "isig"} <= mode  # no echo, no line buffering; ctrl+c stops
    editor = PlainEditor()
    term.keys("first", "Enter", "second")
    editor.keys("first", "Enter", "second")
    for data, bracketed in ((b"\r\nPaste one.\r\nPaste two.", True), (b"\r\nRaw.\r\n", False)):
        paste(term, data, bracketed, raw=True)
        editor.paste(data, raw=True)
    assert "^p" not in term.screen(), "the editor started before the burst was typed"
    term.wait_for(lambda s: "Raw." in s and idle(s), what="the burst", timeout=90)
    quit_when_synced(term)
    assert saved_text("early") == editor.text == "first\nsecond\nPaste one.\nPaste two.\nRaw.\n"
    assert {"icrnl", "icanon", "echo"} <= pane_mode(term)
