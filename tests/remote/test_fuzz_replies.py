"""Hostile server replies to the remote runner's probe and completion calls: each ends
in a connected runner (or a finished generation) or one :class:`LoomError` line.

The hostile server (``tests/remote/hostile_replies.py``) speaks llama-server's API well enough
to be connected to, with one reply or one stream event changed at a time: wrong types,
missing fields, huge numbers, escapes, JSON nested too deeply, bodies cut short,
malformed SSE lines. No model is needed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loomterm.engine import Loom
from loomterm.engine.remote import connect
from loomterm.errors import LoomError
from tests.fuzzing import HOSTILE, budget, dumps
from tests.remote.hostile_replies import Reply, hostile_server

GOOD = {
    "/props": {
        "total_slots": 2,
        "default_generation_settings": {"n_ctx": 512},
        "model_path": "/models/m.gguf",
        "eos_token": "</s>",
    },
    "/v1/models": {"data": [{"id": "m", "meta": {"n_vocab": 100, "n_ctx_train": 512}}]},
    "/tokenize": {"tokens": [{"id": 1, "piece": "a"}, {"id": 2, "piece": "b"}]},
    "/detokenize": {"content": "a"},
    "/completion": {"tokens": [], "stop": True, "timings": {"prompt_n": 2}},
}
TOKEN_EVENT = {
    "index": 0,
    "content": "a",
    "tokens": [1],
    "stop": False,
    "completion_probabilities": [
        {
            "id": 1,
            "logprob": -0.5,
            "bytes": [97],
            "top_logprobs": [{"id": 1, "logprob": -0.5, "bytes": [97]}, {"id": 2, "logprob": -1.5}],
        }
    ],
}
STOP_EVENT = {"index": 0, "stop": True, "stop_type": "limit", "timings": {"prompt_n": 2}}


def offline(monkeypatch) -> None:
    """No reaching for the hub: the environment variable, and the constant
    huggingface_hub read from it when it was imported (earlier in the test run)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)


def paths_in(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value a mutation may go."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_in(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += paths_in(item, (*prefix, i))
    return found


def set_at(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    value = copy.deepcopy(value)
    holder = value
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = new
    return value


WRONG = HOSTILE | st.sampled_from(["<1e999>", -1, 2**31, 2**64, 1.5, True, "\x1b[2J", [], {}, None])


@st.composite
def mutated(draw, good: Any) -> bytes:
    """``good`` with one place changed (or dropped), as JSON bytes; or raw garbage."""
    kind = draw(st.sampled_from(["change", "change", "change", "drop", "raw"]))
    if kind == "raw":
        return draw(
            st.binary(max_size=40)
            | st.sampled_from([b"", b"{", b"[" * 5000, b"null", b"\xff\xfe", b'{"a": 1e999}'])
        )
    path = draw(st.sampled_from(paths_in(good)))
    if kind == "drop" and path and isinstance(path[-1], str):
        value = copy.deepcopy(good)
        holder = value
        for step in path[:-1]:
            holder = holder[step]
        del holder[path[-1]]
    else:
        value = set_at(good, path, draw(WRONG))
    return dumps(value).encode()


def serve(replies: dict[str, Reply], stream: bytes | None = None):
    """A script: the good replies, with ``replies`` instead where given, and ``stream``
    as the body of a streamed completion."""

    def script(method: str, path: str, body: bytes) -> Reply | None:
        path = path.split("?")[0]
        if path in replies:
            return replies[path]
        if (
            path == "/completion"
            and stream is not None
            and b'"stream":true' in body.replace(b" ", b"")
        ):
            return Reply(content_type="text/event-stream", body=stream)
        if path in GOOD:
            return Reply(body=json.dumps(GOOD[path]).encode())
        return Reply(404, body=b'{"error": {"message": "no such endpoint"}}')

    return hostile_server(script)


@budget(60)
@given(
    path=st.sampled_from(sorted(GOOD)),
    data=st.data(),
    status=st.sampled_from([200, 200, 200, 204, 302, 404, 500]),
    cut=st.booleans(),
)
def test_hostile_probe_replies_end_in_a_runner_or_one_line(
    monkeypatch, tmp_path, path, data, status, cut
):
    # No local tokenizer to fall back on (the test cache holds the default model's,
    # seconds to load per example): the server's replies alone decide.
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(tmp_path))
    offline(monkeypatch)
    body = data.draw(mutated(GOOD[path]))
    with serve({path: Reply(status, body=body, cut=cut)}) as url:
        try:
            runner = connect(url, connect_timeout=2, read_timeout=2)
        except LoomError as exc:
            assert "\n" not in str(exc), str(exc)
        else:
            runner.close()


def sse(events: list[bytes]) -> bytes:
    return b"".join(b"data: " + event + b"\n\n" for event in events)


@st.composite
def streams(draw) -> bytes:
    """A completion stream with one event changed, a line mangled, or cut short."""
    events = [json.dumps(TOKEN_EVENT).encode()] * 2 + [json.dumps(STOP_EVENT).encode()]
    which = draw(st.integers(0, len(events) - 1))
    kind = draw(st.sampled_from(["event", "event", "line", "cut"]))
    if kind == "event":
        events[which] = draw(mutated(TOKEN_EVENT if which < 2 else STOP_EVENT))
        return sse(events)
    if kind == "line":
        line = draw(
            st.sampled_from(
                [b"data:", b"data: [DONE]", b"data: {", b"event: error", b": ping", b"data: 5"]
            )
            | st.binary(max_size=30)
        )
        return sse(events[:which]) + line + b"\n\n" + sse(events[which:])
    whole = sse(events)
    return whole[: draw(st.integers(0, len(whole) - 1))]


@budget(80)
@given(stream=streams())
def test_hostile_completion_streams_end_in_tokens_or_one_line(monkeypatch, stream):
    offline(monkeypatch)
    with serve({}, stream) as url:
        # The probe is the good one; a loaded machine may still time it out (one line).
        try:
            loom = Loom.load(url, read_timeout=5, connect_timeout=5)
        except LoomError as exc:
            assert "\n" not in str(exc), str(exc)
            return
        try:
            node = loom.append(loom.root, "ab")
            kids = loom.generate(node, 3, temperature=0)
        except LoomError as exc:
            assert "\n" not in str(exc), str(exc)
        else:
            assert all(isinstance(t, int) for kid in kids for t in kid.tokens)
        finally:
            loom.runner.close()


def test_the_good_stream_generates(monkeypatch):
    """The baseline the fuzzers mutate is a working server: tokens come back."""
    offline(monkeypatch)
    good = sse([json.dumps(TOKEN_EVENT).encode()] * 2 + [json.dumps(STOP_EVENT).encode()])
    with serve({}, good) as url:
        loom = Loom.load(url, read_timeout=2, connect_timeout=2)
        try:
            (kid,) = loom.generate(loom.append(loom.root, "ab"), 3, temperature=0)
            assert kid.tokens == [1, 1] and kid.logprobs == [-0.5, -0.5]
        finally:
            loom.runner.close()
