"""Who wrote what survives the session file and reaches every export: the model table
(key to record) and each node's ``meta["model"]``."""

from __future__ import annotations

import json
import re

from loomterm.engine.local.runner import LocalRunner
from loomterm.engine.models.load import load_model
from loomterm.export.dispatch import render
from loomterm.sessions.session import Session, load_session
from tests.helpers import make_loom


def two_model_session(tiny_llama_dir, tiny_gpt2_dir, path):
    loom = make_loom(tiny_llama_dir)
    loom.update_settings(temperature=0.0)
    session = Session.create(loom, path)
    loom.attach("gpt2", LocalRunner(load_model(str(tiny_gpt2_dir), device="cpu")))
    prompt = loom.append(loom.root, "Once upon a time")
    mine = loom.generate(prompt, 4)
    theirs = loom.generate(prompt, 4, model="gpt2")
    loom.cursor = theirs[0]
    return loom, session, mine[0], theirs[0]


def test_reopen_keeps_who_wrote_what(tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    path = tmp_path / "two.loom"
    loom, session, mine, theirs = two_model_session(tiny_llama_dir, tiny_gpt2_dir, path)
    llama = loom.active_model
    session.close()
    data = load_session(path)
    assert data.tree.nodes[mine.id].meta["model"] == llama
    assert data.tree.nodes[theirs.id].meta["model"] == "gpt2"
    assert list(data.models) == [llama, "gpt2"]
    assert data.models["gpt2"]["kind"] == "local" and data.models["gpt2"]["name"].startswith(
        "tiny-gpt2"
    )

    again = Session.open(path)  # on the session's own model: the GPT-2 is recorded only
    assert again.loom.active_model == llama and list(again.loom.models) == [llama]
    assert list(again.loom.model_table) == [llama, "gpt2"]
    # Attaching the GPT-2 again takes over its recorded key.
    key = again.loom.attach(None, LocalRunner(load_model(str(tiny_gpt2_dir), device="cpu")))
    assert key == "gpt2"
    [kid] = again.loom.generate(again.loom.tree.nodes[mine.id].parent, 3, model=key)
    assert kid.meta["model"] == "gpt2"
    again.close()
    assert list(load_session(path).models) == [llama, "gpt2"]


def test_exports_carry_the_writer_and_a_legend(tiny_llama_dir, tiny_gpt2_dir, tmp_path):
    path = tmp_path / "two.loom"
    loom, session, mine, theirs = two_model_session(tiny_llama_dir, tiny_gpt2_dir, path)
    llama = loom.active_model
    session.close()
    data = load_session(path)
    tree = json.loads(render(data, "json", branch="all"))
    by_id = {node["id"]: node for node in tree["nodes"]}
    assert by_id[theirs.id]["meta"]["model"] == "gpt2"
    assert by_id[mine.id]["meta"]["model"] == llama
    assert set(tree["models"]) == {llama, "gpt2"}

    markdown = re.sub(r"\\(.)", r"\1", render(data, "md", attribution=True))  # unescaped
    assert "- Models" in markdown and "gpt2: tiny-gpt2" in markdown and "(local, " in markdown
    assert "Model \u00b7 gpt2" in markdown  # the cursor's path: the GPT-2's text

    page = render(data, "html", branch="all")
    assert 'class="models"' in page and 'data-model="gpt2"' in page
    assert f'data-model="{llama}"' in page
