"""One road to the terminal (``loomterm.sanitize``): escape sequences from outside are
shown, never obeyed; document text piped to a file stays byte-exact; the command line's
status and error lines are always safe (a real pseudo-terminal and real pipes)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomterm.sanitize import for_stream, safe_line, safe_text

ATTACK = "a\x1b]52;c;aGFja2Vk\x07b\x1b[2J\x9b31m\u202eevil\x00\x7f"
CONTROLS = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\u202e", "\u2028"}


def test_escape_sequences_are_shown_not_obeyed():
    shown = safe_line(ATTACK + "\nnext")
    assert shown == (
        "a\u241b]52;c;aGFja2Vk\u2407b\u241b[2J\\x9b31m\\u202eevil\u2400\u2421\u23cenext"
    )
    assert safe_text("one\n\ttwo\x1b[2J") == "one\n\ttwo\u241b[2J"  # lines and tabs kept


@given(st.text())
def test_nothing_unsafe_survives(text):
    assert not CONTROLS & set(safe_line(text))
    assert not (CONTROLS - {"\n", "\t"}) & set(safe_text(text))


def test_document_text_is_exact_to_a_pipe_and_safe_to_a_terminal(tmp_path):
    with open(tmp_path / "out", "w", encoding="utf-8") as file:
        assert for_stream(ATTACK, file) == ATTACK
    main, side = pty.openpty()
    try:
        with open(side, "w", encoding="utf-8", closefd=False) as terminal:
            assert for_stream(ATTACK, terminal) == safe_text(ATTACK)
    finally:
        os.close(main)
        os.close(side)


def loomterm(*args: str, tty: bool = False) -> tuple[int, bytes, bytes]:
    """Run the command; stdout a pipe, or a pseudo-terminal with ``tty``."""
    command = [sys.executable, "-m", "loomterm.cli", *args]
    if not tty:
        done = subprocess.run(command, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
        return done.returncode, done.stdout, done.stderr
    main, side = pty.openpty()
    process = subprocess.Popen(
        command, stdout=side, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    os.close(side)
    out = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    err = process.stderr.read()
    return process.wait(timeout=300), bytes(out), err


def test_sessions_lists_hostile_names_safely(isolated_dirs):
    from loomterm.config.locations import sessions_dir

    folder = sessions_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "\x1b]0;pwned\x07\x1b[2J.loom").write_bytes(b"not a session")
    code, out, err = loomterm("sessions")
    assert code == 0, err
    assert b"\x1b" not in out and b"\x07" not in out
    assert "\u241b]0;pwned\u2407\u241b[2J".encode() in out


@pytest.mark.slow
def test_generate_is_byte_exact_to_a_pipe_and_safe_to_a_terminal(isolated_dirs, tiny_llama_dir):
    prompt = "Hi\x1b]0;title\x07 there\x1b[2J"
    args = ["--model", str(tiny_llama_dir), "--max-new-tokens", "3", "--seed", "1"]
    code, out, err = loomterm("generate", "-s", "piped", "--prompt", prompt, *args)
    assert code == 0, err
    assert out.decode().startswith(prompt)  # a writer's text, exactly
    code, out, err = loomterm("generate", "-s", "shown", "--prompt", prompt, *args, tty=True)
    assert code == 0, err
    assert b"\x1b" not in out and b"\x07" not in out
    assert "Hi\u241b]0;title\u2407 there\u241b[2J".encode() in out
    # The session's text exported to stdout (-o -): exact to a pipe, safe to a terminal.
    code, out, err = loomterm("export", "piped", "-o", "-", "--format", "txt")
    assert code == 0, err
    assert prompt.encode() in out
    code, out, err = loomterm("export", "piped", "-o", "-", "--format", "txt", tty=True)
    assert code == 0, err
    assert b"\x1b" not in out and "Hi\u241b]0;title\u2407 there".encode() in out
