"""No Hugging Face hub on the machine: a hub id that is not in the local cache is one
line at once (``engine.models.hub``), not half a minute of ``Retrying in 8s`` lines; one
in the cache still loads without asking the network."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from loomterm.engine.models import hub
from loomterm.errors import ModelLoadError


def closed_port() -> int:
    """A local port nothing listens on: connecting is refused, as with no network."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """The hub's address is a closed port; an empty Hugging Face cache; no proxy."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name in (*hub.PROXY_ENVS, "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    hub._answers.clear()  # noqa: SLF001 - each test asks afresh
    yield
    hub._answers.clear()  # noqa: SLF001


def test_a_hub_id_without_a_hub_is_one_line_within_two_seconds(no_hub):
    from loomterm.engine.models.load import load_model

    start = time.perf_counter()
    with pytest.raises(ModelLoadError) as caught:
        load_model("someone/some-model")
    seconds = time.perf_counter() - start
    message = str(caught.value)
    assert "\n" not in message and seconds < 2.0
    assert message.startswith("cannot load model 'someone/some-model': not a local folder")
    assert "the hub (127.0.0.1:" in message and "cannot be reached (Connection refused)" in message


def test_the_command_line_says_it_before_torch(no_hub):
    """``loomterm --model HUB_ID`` prints the one line and exits before the engine is
    imported: no progress line, no retries."""
    code = (
        "import sys; from loomterm import cli; rc = cli.main(['--prompt', 'Hi', '--model', "
        "'someone/some-model']); print('torch' in sys.modules); sys.exit(rc)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env=dict(os.environ),
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout.strip() == "False"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be reached" in lines[0], result.stderr
    assert "Retrying" not in result.stderr


def test_offline_is_said_and_a_proxy_is_what_is_asked(no_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"HF_HUB_OFFLINE is set\)$"):
        hub.check_hub_id("someone/some-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    port = closed_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    assert hub.target() == ("127.0.0.1", port)
    monkeypatch.setenv("NO_PROXY", "example")
    assert hub.target() == ("hub.example", 443)


def test_a_listening_hub_is_reachable(no_hub, monkeypatch):
    """Something that accepts connections counts as a hub (the hub's own answer, a
    missing or gated model, is then ``load``'s business)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub.unreachable() is None
