"""The key dialog in a real terminal (tmux): ``loomterm -s NAME`` on a session whose
server the file names (a recording server in front of a real llama-server) asks before
the key goes there, shows the host and never the key; "y" sends it, and the editor
loads on that server. Skipped without tmux or the installed command."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from loomterm.sessions.session import session_path
from tests.helpers import require_or_skip
from tests.remote.hostile import Hostile
from tests.remote.test_credentials import CANARY
from tests.tui.test_tmux import Tmux, idle, loomterm_command


def test_the_key_dialog_in_a_real_terminal(tmp_path, isolated_dirs, llama_server, monkeypatch):
    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, save_loom

    require_or_skip(shutil.which("tmux"), "tmux is not installed")
    command = loomterm_command()
    require_or_skip(command, "the loomterm command is not installed (pip install -e .)")
    monkeypatch.delenv("LOOMTERM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = Hostile(upstream=llama_server.url).start()
    tmux = None
    try:
        loom = Loom.load(server.url)  # no key in the environment yet: none sent
        save_loom(loom, session_path("bait"))
        close_session(loom)
        before = len(server.seen)
        names = ("LOOMTERM_DATA_DIR", "LOOMTERM_CONFIG_DIR", "LOOMTERM_CACHE_DIR", "PYTHONPATH")
        env = {name: os.environ[name] for name in names if os.environ.get(name)}
        if "PYTHONPATH" in env:
            parts = env["PYTHONPATH"].split(os.pathsep)
            env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
        env["LOOMTERM_API_KEY"] = CANARY
        tmux = Tmux(f"loomterm-key-{os.getpid()}", tmp_path, env)
        tmux.start([command, "-s", "bait"])
        asking = tmux.wait_for(
            lambda s: "Send your API key" in s, timeout=90, what="the key dialog"
        )
        host = server.url.removeprefix("http://")
        assert host in asking and "LOOMTERM_API_KEY" in asking and CANARY not in asking
        assert len(server.seen) == before  # nothing goes out while it asks
        tmux.keys("y")
        ready = tmux.wait_for(
            lambda s: idle(s) and "Send your API key" not in s and "loading" not in s,
            timeout=120,
            what="the model on the server",
        )
        assert CANARY not in ready
        sent = server.authorizations()[before:]
        assert sent and all(value == f"Bearer {CANARY}" for value in sent)
        tmux.keys("C-q")
        assert tmux.exit_status() == "0"
    finally:
        if tmux is not None:
            tmux.kill()
        server.stop()
