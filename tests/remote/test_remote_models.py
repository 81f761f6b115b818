"""One tree, two models: the local default model and a real llama-server serving the same
model's GGUF (one SmolLM2 tokenizer). Each writes what it writes alone; the session file
and the exports keep who wrote what; a model with another tokenizer is refused."""

from __future__ import annotations

import json

import pytest

from loomterm.engine import Loom
from loomterm.engine.remote import connect
from loomterm.errors import InputError
from loomterm.export.dispatch import render
from loomterm.sessions.session import Session, load_session

pytestmark = pytest.mark.default_model

PROMPT = "Once upon a time"


def greedy(loom: Loom, prompt, n_tokens: int, model: str | None = None):
    # Healing off: the local model's children are compared with a fresh model's and the
    # server's from the same prompt tokens (the server cannot heal).
    return loom.generate(prompt, n_tokens, temperature=0.0, model=model, token_healing="off")


def test_a_tree_with_branches_from_the_local_model_and_the_server(llama_server, tmp_path):
    loom = Loom.load(device="cpu", dtype="float32")
    session = Session.create(loom, tmp_path / "mixed.loom")
    local = loom.active_model
    assert loom.attach("server", connect(llama_server.url)) == "server"
    assert loom.models["server"].capabilities.node_kv is False
    prompt = loom.append(loom.root, PROMPT)
    [mine] = greedy(loom, prompt, 8)
    [theirs] = greedy(loom, prompt, 8, model="server")
    assert mine.meta["model"] == local and theirs.meta["model"] == "server"
    assert mine.kv is not None and theirs.kv is None  # the server keeps its own KV

    # Each model wrote what it writes alone.
    alone = Loom.load(device="cpu", dtype="float32")
    [again] = greedy(alone, alone.append_tokens(alone.root, prompt.tokens), 8)
    assert again.tokens == mine.tokens
    served = Loom.load(llama_server.url)
    [direct] = greedy(served, served.append_tokens(served.root, prompt.tokens), 8)
    assert direct.tokens == theirs.tokens

    # The server continues the local model's branch, and the local model the server's.
    loom.use("server")
    [on_local] = loom.generate(mine, 4, temperature=0.0)
    loom.use(local)
    [on_server] = loom.generate(theirs, 4, temperature=0.0)
    assert on_local.meta["model"] == "server" and on_server.meta["model"] == local
    loom.cursor = on_server
    session.close()

    data = load_session(tmp_path / "mixed.loom")
    assert {data.tree.nodes[n.id].meta["model"] for n in (mine, on_server)} == {local}
    assert {data.tree.nodes[n.id].meta["model"] for n in (theirs, on_local)} == {"server"}
    record = data.models["server"]
    assert record["kind"] == "llama-server" and record["source"] == llama_server.url
    assert data.models[local]["kind"] == "local"

    # Reopened on the local model; the server joins again under its recorded key.
    reopened = Session.open(tmp_path / "mixed.loom")
    loom = reopened.loom
    assert list(loom.model_table) == [local, "server"] and list(loom.models) == [local]
    assert loom.attach(None, connect(llama_server.url)) == "server"
    [more] = loom.generate(loom.cursor, 3, temperature=0.0, model="server")
    assert more.meta["model"] == "server"
    reopened.close()

    data = load_session(tmp_path / "mixed.loom")
    tree = json.loads(render(data, "json", branch="all"))
    writers = {node["id"]: node["meta"].get("model") for node in tree["nodes"]}
    assert writers[theirs.id] == "server" and writers[mine.id] == local
    assert tree["models"]["server"]["kind"] == "llama-server"
    markdown = render(data, "md", attribution=True)
    assert "  - server: SmolLM2\\-135M\\-Instruct" in markdown  # names escaped as text
    assert "**Model \u00b7 server**" in markdown


def test_a_server_with_another_tokenizer_is_refused(llama_server, tiny_llama_dir):
    from tests.helpers import make_loom

    loom = make_loom(tiny_llama_dir)
    with pytest.raises(InputError) as caught:
        loom.attach("server", connect(llama_server.url))
    message = str(caught.value)
    assert "\n" not in message
    assert "cannot join this tree: its vocabulary has 49152 tokens, the tree's 384" in message
    assert list(loom.models) == [loom.active_model]
