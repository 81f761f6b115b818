"""The Loom's operations over a real llama-server, each checked against what the server
itself returns for the same token path (a direct request with no prefix cache)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from loomterm.engine import Loom
from loomterm.engine.remote import connect
from loomterm.engine.remote.runner import RemoteRunner
from loomterm.errors import InputError

PROMPT = "The history of weaving begins"
LOGPROB_TOL = 0.05  # the same model, different batch shapes: float noise


def direct(url: str, tokens: list[int], n_predict: int, **params) -> dict:
    """The server's own answer for ``tokens``, evaluated afresh (``cache_prompt`` off)."""
    body = {
        "prompt": tokens,
        "n_predict": n_predict,
        "temperature": 0.0,
        "n_probs": 10,
        "cache_prompt": False,
        "samplers": ["penalties", "temperature", "top_n_sigma", "top_k", "top_p", "min_p"],
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        **params,
    }
    reply = httpx.post(url + "/completion", json=body, timeout=120).json()
    probs = reply["completion_probabilities"]
    return {
        "ids": [p["id"] for p in probs],
        "logprobs": [p["logprob"] for p in probs],
        "top": [[a["id"] for a in p["top_logprobs"]] for p in probs],
        "timings": reply["timings"],
    }


def assert_matches(node, answer) -> None:
    assert node.tokens == answer["ids"]
    for mine, theirs in zip(node.logprobs, answer["logprobs"]):
        assert mine == pytest.approx(theirs, abs=LOGPROB_TOL)
    # The best alternatives agree (ties deep in the list may swap places).
    for mine, theirs in zip(node.top, answer["top"]):
        assert [t for t, _ in mine][:3] == theirs[:3]


@pytest.fixture
def loom(llama_server) -> Loom:
    return Loom.load(llama_server.url)


def test_connects_with_the_local_tokenizer_and_declares_what_it_cannot(loom, llama_server):
    runner = loom.runner
    assert isinstance(runner, RemoteRunner)
    assert runner.info.kind == "llama-server"
    assert runner.tokens_by == "local"  # the GGUF's tokenizer, checked against /tokenize
    assert runner.n_ctx == 1024 and runner.slots == 4
    caps = loom.capabilities
    assert not caps.rerope and not caps.full_logits and not caps.node_kv and not caps.drafting
    assert caps.batched_siblings
    assert "exactly" in caps.reason("rerope")
    identity = runner.identity()
    assert identity["source"] == llama_server.url
    assert identity["server"]["tokens_by"] == "local"
    assert set(identity["fingerprint"]) >= {"config", "weights", "tokenizer"}
    # Same server, same model: the same fingerprint on a second connection.
    assert connect(llama_server.url).fingerprint == runner.fingerprint
    with pytest.raises(InputError, match="next-token logits"):
        loom.next_logits(loom.append(loom.root, PROMPT))


def test_append_and_greedy_generate_equal_the_server_and_use_its_cache(loom, llama_server):
    node = loom.append(loom.root, PROMPT)
    assert loom.runner.exchanges[-1].what == "prepare"  # append warmed the prefix cache
    progress: list[tuple] = []
    loom.progress = lambda *report: progress.append(report)
    [kid] = loom.generate(node, 12, temperature=0)
    assert progress[-1] == ("prefill", node.end, node.end)  # the server's prompt progress
    answer = direct(llama_server.url, loom.tokens(node), 12)
    assert_matches(kid, answer)
    assert len(kid.top[0]) == 10
    decode = loom.runner.exchanges[-1]
    assert decode.what == "decode" and decode.prompt_tokens == node.end
    # The warmed prefix was reused: the server evaluated at most the last token again.
    assert decode.prompt_n is not None and decode.prompt_n <= 1
    assert answer["timings"]["prompt_n"] == node.end  # the direct request: all of it


def test_siblings_one_request_and_seeded_each_their_own(loom, llama_server):
    node = loom.append(loom.root, PROMPT)
    before = len(node.children)
    kids = loom.generate(node, 6, n=3, temperature=1.5, seed=None)
    assert len(kids) == 3 and len(node.children) == before + 3
    assert all(1 <= len(k.tokens) <= 6 and len(k.top) == len(k.tokens) for k in kids)
    assert len({tuple(k.tokens) for k in kids}) > 1  # three draws, not one copied
    seeded = loom.generate(node, 6, n=2, temperature=1.0, seed=41)
    assert [k.seed for k in seeded] == [41, 42]
    sampling = dict(temperature=1.0, seed=42, repeat_penalty=1.0, repeat_last_n=0)
    answer = direct(llama_server.url, loom.tokens(node), 6, **sampling)
    assert seeded[1].tokens == answer["ids"]  # the server's own draw for that seed


def test_top_n_sigma_reaches_the_server_in_loomterm_s_order(loom, llama_server):
    """At a tiny n only the best token is within n deviations of itself: hot sampling
    with top-n-sigma on gives the greedy tokens, for every seed."""
    node = loom.append(loom.root, PROMPT)
    greedy = direct(llama_server.url, loom.tokens(node), 8)
    kids = loom.generate(node, 8, n=3, temperature=1.5, top_n_sigma=0.001, seed=7)
    assert [k.tokens for k in kids] == [greedy["ids"]] * 3
    hot = loom.generate(node, 8, n=3, temperature=1.5, seed=7)
    assert any(k.tokens != greedy["ids"] for k in hot)  # without it they wander


def test_picking_a_stored_alternative_sends_nothing(loom):
    node = loom.append(loom.root, PROMPT)
    [kid] = loom.generate(node, 4, temperature=0)
    position = node.end + 1
    alternative, logprob = kid.top[1][1]  # (the pick splits ``kid``: read it first)
    sent = len(loom.runner.exchanges)
    picked = loom.pick(kid, position, alternative)
    assert picked.tokens[-1] == alternative and picked.end == position + 1
    assert picked.logprobs[-1] == logprob
    assert len(loom.runner.exchanges) == sent


def test_cancel_stops_within_one_token_and_frees_the_server(loom, llama_server):
    node = loom.append(loom.root, PROMPT)
    cancel = threading.Event()
    seen: list[int] = []

    def on_token(_kid, token, _piece):
        seen.append(token)
        if len(seen) == 3:
            cancel.set()

    start = time.monotonic()
    [kid] = loom.generate(node, 200, temperature=0, on_token=on_token, cancel=cancel)
    assert len(kid.tokens) == 3 and kid.tokens == seen
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the closed stream stops the server's slot
        slots = httpx.get(llama_server.url + "/slots", timeout=10).json()
        if not any(slot["is_processing"] for slot in slots):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the server kept generating after the stream was closed")


def test_truncate_regenerate_and_exact_splice_equal_the_server(loom, llama_server):
    node = loom.append(loom.root, PROMPT)
    [kid] = loom.generate(node, 10, temperature=0)
    cut = loom.truncate(kid, node.end + 4)
    [again] = loom.generate(cut, 6, temperature=0)
    assert_matches(again, direct(llama_server.url, loom.tokens(cut), 6))
    assert loom.runner.exchanges[-1].prompt_n <= 1  # the truncated path was still cached
    spliced = loom.splice(again, 1, 3, " story of")  # fast asked, exact given
    assert loom.is_exact(spliced)
    assert loom.text(spliced).startswith("The story of")
    [after] = loom.generate(spliced, 6, temperature=0)
    assert_matches(after, direct(llama_server.url, loom.tokens(spliced), 6))


def test_the_openai_dialect_on_the_same_server_gives_the_same_tokens(llama_server):
    native = Loom.load(llama_server.url)
    openai = Loom.load(llama_server.url, server_kind="openai")
    assert openai.runner.info.kind == "openai"
    assert not openai.capabilities.batched_siblings or openai.runner.dialect.kind == "openai"
    a = native.append(native.root, PROMPT)
    b = openai.append(openai.root, PROMPT)
    [x] = native.generate(a, 8, temperature=0)
    [y] = openai.generate(b, 8, temperature=0)
    assert x.tokens == y.tokens
    assert len(y.top[0]) == 10
    for mine, theirs in zip(x.logprobs, y.logprobs):
        assert mine == pytest.approx(theirs, abs=LOGPROB_TOL)


def test_the_server_bench_rows_carry_the_servers_own_counts(loom):
    from loomterm.bench.remote import LATENCY, RemotePlan, run_remote_bench

    plan = RemotePlan(lengths=(96,), reps=1, decode_tokens=4, sibling_tokens=2, sibling_counts=(2,))
    rows = run_remote_bench(loom, plan, log=lambda _line: None)
    latency = {row.name: row for row in rows if row.section == LATENCY}
    assert set(latency) == {
        "truncate @96",
        "branch switch to a cached sibling @96",
        "alternative pick @96",
        "exact splice mid @96",
        "append 10 tokens @96",
    }
    truncate = latency["truncate @96"].extra
    assert truncate["prompt_n_baseline"] == 96 - 8  # the whole truncated path, afresh
    assert truncate["prompt_n_loomterm"] <= 1  # only what the cache could not give
    assert latency["append 10 tokens @96"].extra["prompt_n_loomterm"] <= 11
    assert [row.section for row in rows[-2:]] == ["Decode (server)", "Siblings (server)"]
    assert rows[-2].note == "identical tokens"
