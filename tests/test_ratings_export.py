"""Ratings leave the app: the JSON tree's ``rating`` field, and the JSON Lines of
preferred and rejected continuations (``--format jsonl``) that preference tuning reads."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from loomterm import export
from loomterm.cli import main
from loomterm.engine import Loom
from loomterm.export import ExportError, render
from loomterm.sessions.session import close_session, load_session, save_loom
from loomterm.tree import rating_of
from tests.helpers import make_loom

PROMPT = "Once upon a time"


@pytest.fixture
def rated(tiny_llama_dir) -> Iterator[tuple[Loom, dict]]:
    """A saved session with rated siblings at two branch points (ratings set through
    the engine, so the session file holds them)."""
    loom = make_loom(tiny_llama_dir)
    loom.update_settings(token_healing="off")  # the prompt is the pair's prompt as typed
    save_loom(loom, "rated")
    prompt = loom.append(loom.root, PROMPT)
    a, b, c = loom.generate(prompt, 6, n=3, temperature=1.0, seed=11)
    loom.set_meta(a, rating=1)
    loom.set_meta(b, rating=-1)
    loom.set_meta(c, rating=-1)
    # A second branch point below a; its good branch is rated on its second node.
    x, y = loom.generate(a, 5, n=2, temperature=1.0, seed=12)
    loom.truncate(x, x.start + 2)  # x's branch is now two nodes: head, then x
    loom.set_meta(x, rating=1)
    loom.set_meta(y, rating=-1)
    loom.set_meta(c, rating=None)  # cleared again
    nodes = {"prompt": prompt, "a": a, "b": b, "c": c, "x": x, "y": y}
    close_session(loom)
    yield loom, nodes


def test_set_meta_saves_a_rating(rated):
    loom, nodes = rated
    data = load_session("rated")
    ratings = {n.id: rating_of(n) for n in data.tree.nodes.values()}
    assert ratings[nodes["a"].id] == 1 and ratings[nodes["b"].id] == -1
    assert ratings[nodes["c"].id] is None and "rating" not in data.tree.nodes[nodes["c"].id].meta


def test_the_json_tree_has_a_rating_field_and_reads_it_back(rated):
    _, nodes = rated
    data = load_session("rated")
    obj = json.loads(render(data, "json"))
    by_id = {node["id"]: node for node in obj["nodes"]}
    assert by_id[nodes["a"].id]["rating"] == 1
    assert by_id[nodes["b"].id]["rating"] == -1
    assert by_id[nodes["c"].id]["rating"] is None
    # A hand-written file with only the field still gets the rating.
    del by_id[nodes["b"].id]["meta"]["rating"]
    back = export.from_json_dict(obj)
    assert rating_of(back.tree.nodes[nodes["b"].id]) == -1


def test_preference_pairs_are_prompt_chosen_rejected(rated):
    loom, nodes = rated
    data = load_session("rated")
    lines = render(data, "jsonl").splitlines()
    pairs = [json.loads(line) for line in lines]
    assert all(set(pair) == {"prompt", "chosen", "rejected"} for pair in pairs)
    a, b, x, y = (nodes[k] for k in "abxy")
    text = loom.text
    # At the first branch point: a (good) against b (bad); c is unrated now.
    assert pairs[0] == {
        "prompt": text(nodes["prompt"]),
        "chosen": loom.decode(a.tokens),
        "rejected": loom.decode(b.tokens),
    }
    # At the second: x's branch is its head and x, rated on x.
    assert pairs[1]["prompt"] == text(a)
    assert pairs[1]["chosen"] == text(x)[len(text(a)) :]
    assert pairs[1]["rejected"] == text(y)[len(text(a)) :]
    assert len(pairs) == 2
    # The prompt and the chosen text are the document's text exactly.
    assert pairs[1]["prompt"] + pairs[1]["chosen"] == text(x)


def test_jsonl_on_the_command_line_and_without_pairs(rated, tmp_path, capsys):
    out = tmp_path / "prefs.jsonl"
    assert main(["export", "rated", "-o", str(out)]) == 0  # the format from the suffix
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    data = load_session("rated")
    for node in data.tree.nodes.values():
        node.meta.pop("rating", None)
    with pytest.raises(ExportError, match="no preference pairs"):
        render(data, "jsonl")
