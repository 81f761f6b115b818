"""``--model URL`` on the command line: a one-shot completion, a session that records the
server's URL (never the key), and one line on stderr when nothing answers."""

from __future__ import annotations

import os
import subprocess
import sys

from loomterm.serving.llama_server import free_port
from loomterm.store import load


def loomterm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loomterm.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_prompt_and_generate_on_a_server(llama_server, isolated_dirs):
    done = loomterm("--model", llama_server.url, "--prompt", "The loom", "--max-new-tokens", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The loom") and len(done.stdout) > len("The loom\n")
    assert f"on {llama_server.url}, server]" in done.stderr

    env = {"LOOMTERM_API_KEY": "not-needed-but-secret"}
    made = loomterm(
        "generate", "-s", "woven", "--model", llama_server.url, "--prompt", "Warp and weft",
        "--max-new-tokens", "4", env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    path = isolated_dirs / "data" / "sessions" / "woven.loom"
    data = load(path)
    assert data.model["source"] == llama_server.url
    assert data.model["server"]["kind"] == "llama-server"
    assert b"not-needed-but-secret" not in path.read_bytes()
    more = loomterm("generate", "-s", "woven", "--max-new-tokens", "3")  # the recorded server
    assert more.returncode == 0, more.stderr
    assert len(load(path).tree.nodes) > len(data.tree.nodes)


def test_nothing_listening_is_one_line_on_stderr():
    port = free_port()
    done = loomterm("--model", f"http://127.0.0.1:{port}", "--prompt", "Hi")
    assert done.returncode == 1
    assert done.stderr == (
        f"loomterm: cannot reach the server at http://127.0.0.1:{port} "
        "(connection refused): is it running?\n"
    )
