"""The llama.cpp runner against a real llama-server on the same GGUF file and threads
(started as tests/remote/ starts it): the same greedy tokens, since the runner runs
llama.cpp with llama-server's defaults (flash attention as llama.cpp decides it, the
same batch sizes) and greedy picks the first highest logit, as llama-server's does."""

from __future__ import annotations

import json
import urllib.request

import pytest

from loomterm.engine import Loom
from tests.helpers import build_log
from tests.llamacpp.conftest import THREADS
from tests.remote.conftest import start_server

NEW_TOKENS = 48
PROMPTS = (
    "The history of the printing press begins",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea, there lived",
)


@pytest.fixture(scope="module")
def server(llama_build, default_gguf):
    from loomterm.serving.llama_build import ensure_llama_server

    running = start_server(
        ensure_llama_server(build_log), default_gguf, n_ctx=1024, slots=1, threads=THREADS
    )
    yield running
    running.stop()


def server_greedy(url: str, prompt: list[int], n: int) -> list[int]:
    body = {
        "prompt": prompt,
        "n_predict": n,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
        "return_tokens": True,
        "stream": False,
    }
    request = urllib.request.Request(
        url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return [int(t) for t in json.loads(reply.read())["tokens"]]


@pytest.mark.parametrize("text", PROMPTS)
def test_greedy_tokens_are_llama_servers(server, binding, default_gguf, text):
    loom = Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=1024, threads=THREADS)
    try:
        node = loom.append(loom.root, text)
        kid = loom.generate(node, NEW_TOKENS, temperature=0)[0]
        theirs = server_greedy(server.url, node.path_tokens(), NEW_TOKENS)
        ours = list(kid.tokens)
        assert ours == theirs[: len(ours)]
        assert len(ours) == NEW_TOKENS or ours[-1] in loom.runner.eos_ids
    finally:
        loom.runner.close()
