"""Hostile server replies to the remote runner's probe and completion calls: each ends
in a connected runner (or finished generation) or one :class:`LoomError` line.

The probe fuzz needs no model: the hostile server answers everything. The completion
fuzz passes the probe through to a real llama-server and answers the completion calls
itself (malformed JSON, wrong types, cut streams, malformed SSE events).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomterm.engine.remote import connect
from loomterm.errors import LoomError
from tests.fuzzing import HOSTILE, budget, dumps
from tests.remote.hostile import Reply, hostile_server

PATHS = [
    "/props",
    "/get_model_info",
    "/version",
    "/v1/models",
    "/tokenize",
    "/detokenize",
    "/completion",
    "/v1/completions",
    "/health",
    "/slots",
]


def _props_like() -> st.SearchStrategy:
    """Replies shaped like llama-server's, vLLM's or SGLang's, with hostile fields."""
    return st.one_of(
        st.fixed_dictionaries(
            {"total_slots": HOSTILE},
            optional={
                "default_generation_settings": HOSTILE | st.fixed_dictionaries({"n_ctx": HOSTILE}),
                "model_path": HOSTILE,
                "eos_token": HOSTILE,
                "chat_template": HOSTILE,
                "model_alias": HOSTILE,
            },
        ),
        st.fixed_dictionaries({"model_path": HOSTILE}, optional={"max_total_num_tokens": HOSTILE}),
        st.fixed_dictionaries({"version": HOSTILE}),
        st.fixed_dictionaries(
            {
                "data": HOSTILE
                | st.lists(
                    st.fixed_dictionaries(
                        {"id": HOSTILE}, optional={"meta": HOSTILE, "max_model_len": HOSTILE}
                    ),
                    max_size=2,
                )
            }
        ),
        st.fixed_dictionaries(
            {
                "tokens": HOSTILE
                | st.lists(
                    HOSTILE | st.fixed_dictionaries({"id": HOSTILE, "piece": HOSTILE}), max_size=3
                )
            }
        ),
        HOSTILE,
    )


REPLIES = st.builds(
    Reply,
    status=st.sampled_from([200, 200, 200, 201, 204, 301, 400, 401, 404, 429, 500, 503, 999]),
    content_type=st.sampled_from(["application/json", "text/html", "text/event-stream", ""]),
    body=st.one_of(
        _props_like().map(lambda v: dumps(v).encode()),
        st.binary(max_size=60),
        st.sampled_from(
            [b"", b"{", b"[" * 5000, b"null", b'"\\u001b[2J"', b"\xff\xfe", b'{"a": 1e999}']
        ),
    ),
    cut=st.booleans(),
)


@budget(80)
@given(replies=st.dictionaries(st.sampled_from(PATHS), REPLIES, min_size=1, max_size=6))
def test_hostile_probe_replies_end_in_a_runner_or_one_line(replies, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def script(method: str, path: str, body: bytes) -> Reply | None:
        return replies.get(path.split("?")[0])

    with hostile_server(script) as url:
        try:
            runner = connect(url, connect_timeout=2, read_timeout=2)
        except LoomError as exc:
            assert "\n" not in str(exc), str(exc)
        else:
            runner.close()
