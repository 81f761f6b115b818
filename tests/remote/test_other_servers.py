"""The same operations against any other server the user started (vLLM, SGLang, an
OpenAI-compatible provider): set ``LOOMTERM_TEST_SERVER_URL`` (and, for a hosted
provider, ``LOOMTERM_API_KEY``). Not part of CI: such a server is too heavy to start
here in every run. Each result is compared with a direct request to the same server."""

from __future__ import annotations

import os
import threading

import pytest

from loomterm.engine import Loom
from loomterm.engine.sample.chain import SamplingParams
from loomterm.sessions.session import Session, close_session

URL = os.environ.get("LOOMTERM_TEST_SERVER_URL", "")
pytestmark = pytest.mark.skipif(not URL, reason="LOOMTERM_TEST_SERVER_URL names no server")
PROMPT = "The history of weaving begins"


def direct_greedy(loom: Loom, tokens: list[int], count: int) -> list[int]:
    """The server's own greedy tokens for ``tokens``, by one plain (unstreamed) request."""
    runner = loom.runner
    path, body = runner.dialect.completion(tokens, count, SamplingParams(temperature=0), None, 1)
    body["stream"] = False
    body.pop("stream_options", None)
    reply = runner.client.post(path, body)
    if "completion_probabilities" in reply:
        return [p["id"] for p in reply["completion_probabilities"]]
    choice = reply["choices"][0]
    return [t.id for t in runner.dialect._tokens(0, choice["logprobs"])]


@pytest.fixture
def loom() -> Loom:
    return Loom.load(URL)


def test_greedy_alternatives_and_exact_splice_equal_the_server(loom):
    node = loom.append(loom.root, PROMPT)
    [kid] = loom.generate(node, 10, temperature=0)
    assert kid.tokens == direct_greedy(loom, loom.tokens(node), 10)
    assert all(len(top) >= 5 for top in kid.top)  # OpenAI itself caps logprobs at 5
    assert all(lp is not None and lp <= 0 for lp in kid.logprobs)
    cut = loom.truncate(kid, node.end + 3)
    spliced = loom.splice(cut, 1, 3, " story of")
    assert loom.is_exact(spliced)
    [after] = loom.generate(spliced, 6, temperature=0)
    assert after.tokens == direct_greedy(loom, loom.tokens(spliced), 6)


def test_siblings_and_cancel(loom):
    node = loom.append(loom.root, PROMPT)
    kids = loom.generate(node, 6, n=3, temperature=1.2)
    assert len(kids) == 3 and all(kid.tokens for kid in kids)
    cancel = threading.Event()

    def stop_at_three(kid, _token, _piece):
        if len(kid.tokens) == 3:
            cancel.set()

    [kid] = loom.generate(node, 200, temperature=0, on_token=stop_at_three, cancel=cancel)
    assert len(kid.tokens) == 3


def test_a_session_round_trip(loom, tmp_path):
    path = tmp_path / "served.loom"
    Session.create(loom, path)
    [kid] = loom.generate(loom.append(loom.root, PROMPT), 4, temperature=0)
    text = loom.text(kid)
    close_session(loom)
    again = Session.open(path).loom
    assert again.text(again.tree.nodes[kid.id]) == text
    close_session(again)
