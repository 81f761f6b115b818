"""A session on the local default model with a real llama-server attached comes back
with the server attached (and active) when reopened for editing; with the server down,
the open says so in one line and keeps the server's branches; once the server is back
at its address, the next open attaches it again."""

from __future__ import annotations

import warnings

import pytest

from loomterm.engine import Loom
from loomterm.engine.remote import connect
from loomterm.sessions.session import Session, load_session

pytestmark = pytest.mark.default_model

PROMPT = "Once upon a time"


def reopen(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = Session.open(path, reattach=True, device="cpu", dtype="float32")
    return session, [str(w.message) for w in caught]


def test_a_server_comes_back_or_is_a_note(own_server, tmp_path):
    server = own_server()
    path = tmp_path / "mixed.loom"
    loom = Loom.load(device="cpu", dtype="float32")
    session = Session.create(loom, path)
    local = loom.active_model
    assert loom.open_model(server.url, "server") == "server"
    prompt = loom.append(loom.root, PROMPT)
    [theirs] = loom.generate(prompt, 6, temperature=0.0, model="server")
    loom.use("server")
    session.close()
    record = load_session(path).models["server"]
    assert record["kind"] == "llama-server" and record["source"] == server.url
    assert "tokenizer_source" in record and "server_model_arg" in record

    again, notes = reopen(path)
    try:
        assert notes == [] and list(again.loom.models) == [local, "server"]
        assert again.loom.active_model == "server"
        [same] = again.loom.generate(again.loom.tree.nodes[prompt.id], 6, temperature=0.0)
        assert same.meta["model"] == "server" and same.tokens == theirs.tokens
    finally:
        again.close()

    port = server.port
    server.kill()
    down, notes = reopen(path)
    try:
        [note] = notes
        assert "model server (" in note and "was not re-attached" in note and "\n" not in note
        assert list(down.loom.models) == [local] and down.loom.active_model == local
        assert down.loom.tree.nodes[theirs.id].meta["model"] == "server"
        assert down.loom.tree.nodes[theirs.id].tokens == theirs.tokens
    finally:
        down.close()

    back = own_server(port=port)
    assert back.url == server.url
    up, notes = reopen(path)
    try:
        assert notes == [] and list(up.loom.models) == [local, "server"]
        assert up.loom.active_model == "server"
        assert up.loom.models["server"].fingerprint == connect(back.url).fingerprint
    finally:
        up.close()
