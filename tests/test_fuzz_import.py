"""Every imported tree ends in a session or in one line, and the file is only read.

Near-valid loomterm JSON trees (built whole, then one field or the structure mutated:
wrong types, token ids that are no ids, unknown, duplicate and cyclic node ids, missing
keys, unicode) and socketteer/loom trees of any shape go through ``loomterm import``
in this process; an imported one is read back and exported in every format, which is
what the editor and the exporters build on.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomterm import export
from loomterm.export import ExportError, read_import
from loomterm.sessions.session import load_session
from tests.fuzzing import (
    FINGERPRINT,
    HOSTILE,
    TEXT,
    assert_clean_end,
    budget,
    digest,
    dumps,
    run_cli,
)

ORIGINS = ["user", "model", "edit", "import"]


@st.composite
def valid_trees(draw) -> dict[str, Any]:
    """A loomterm JSON tree, version 1, that imports as it is (no model needed: it names
    its model's fingerprint)."""
    count = draw(st.integers(min_value=1, max_value=6))
    parents = [None] + [draw(st.integers(min_value=0, max_value=i - 1)) for i in range(1, count)]
    nodes = []
    for i, parent in enumerate(parents):
        n = 0 if parent is None else draw(st.integers(min_value=0, max_value=4))
        tokens = draw(st.lists(st.integers(0, 50_000), min_size=n, max_size=n))
        pieces = draw(st.lists(TEXT, min_size=n, max_size=n))
        lp = st.none() | st.floats(max_value=0.0, allow_nan=False) | st.just("-inf")
        alts = st.none() | st.lists(st.tuples(st.integers(0, 50_000), lp.filter(bool)), max_size=3)
        nodes.append(
            {
                "id": i,
                "parent": parent,
                "children": [j for j, p in enumerate(parents) if p == i and j != i],
                "origin": "root" if parent is None else draw(st.sampled_from(ORIGINS)),
                "text": "".join(pieces),
                "tokens": tokens,
                "pieces": pieces,
                "logprobs": draw(st.lists(lp, min_size=n, max_size=n)),
                "top": [
                    None if a is None else [[t, x] for t, x in a]
                    for a in draw(st.lists(alts, min_size=n, max_size=n))
                ],
                "approx": draw(st.booleans()),
                "sampling": draw(st.none() | st.just({"temperature": 0.8, "top_p": 0.9})),
                "seed": draw(st.none() | st.integers(0, 2**32)),
                "created": 1_730_000_000.0 + i,
                "rating": draw(st.sampled_from([None, 1, -1])),
                "meta": draw(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "role": st.sampled_from(["user", "assistant"]),
                            "bookmark": st.booleans() | TEXT,
                            "hidden": st.booleans(),
                            "model": st.just("m"),
                            "tags": st.lists(TEXT, max_size=2),
                        },
                    )
                ),
            }
        )
    return {
        "format": "loomterm-tree",
        "version": 1,
        "name": draw(TEXT),
        "created": 1_730_000_000.0,
        "modified": 1_730_000_100.0,
        "model": {"name": "m", "source": "m", "fingerprint": FINGERPRINT},
        "models": {"m": {"name": "m", "kind": "local", "source": "m"}},
        "settings": draw(st.just({}) | st.just({"temperature": 0.7})),
        "contexts": {},
        "cursor": draw(st.integers(0, count - 1)),
        "root": 0,
        "nodes": nodes,
        "vocab": {"7": "x"},
    }


# Values a field may be given instead of its own: anything, and the classics.
WRONG = HOSTILE | st.sampled_from(
    ["<1e999>", -1, 2**31, 2**63, 1.5, True, "0", [], {}, None, "x" * 100_000]
)
NODE_FIELDS = [
    "id",
    "parent",
    "children",
    "origin",
    "text",
    "tokens",
    "pieces",
    "logprobs",
    "top",
    "approx",
    "sampling",
    "seed",
    "created",
    "rating",
    "meta",
]
TOP_FIELDS = [
    "format",
    "version",
    "name",
    "created",
    "modified",
    "model",
    "models",
    "settings",
    "contexts",
    "cursor",
    "root",
    "nodes",
    "vocab",
]
META_KEYS = ["role", "bookmark", "hidden", "model", "rating", "merged_origins", "context", "tags"]


@st.composite
def mutated_trees(draw) -> dict[str, Any]:
    """A valid tree with one thing wrong (or, sometimes, several)."""
    tree = draw(valid_trees())
    for _ in range(draw(st.integers(1, 3))):
        nodes = tree["nodes"] if isinstance(tree.get("nodes"), list) else []
        node = draw(st.sampled_from(nodes)) if nodes else None
        kind = draw(
            st.sampled_from(
                [
                    "node field",
                    "element",
                    "meta",
                    "top field",
                    "drop node key",
                    "drop top key",
                    "duplicate node",
                    "cycle",
                    "unknown child",
                ]
            )
        )
        if node is None or not isinstance(node, dict):
            tree[draw(st.sampled_from(TOP_FIELDS))] = draw(WRONG)
        elif kind == "node field":
            node[draw(st.sampled_from(NODE_FIELDS))] = draw(WRONG)
        elif kind == "element":  # one token, piece, logprob or alternative
            name = draw(st.sampled_from(["tokens", "pieces", "logprobs", "top", "children"]))
            items = node.get(name)
            if isinstance(items, list) and items:
                items[draw(st.integers(0, len(items) - 1))] = draw(WRONG)
        elif kind == "meta":
            if isinstance(node.get("meta"), dict):
                node["meta"][draw(st.sampled_from(META_KEYS))] = draw(WRONG)
        elif kind == "top field":
            tree[draw(st.sampled_from(TOP_FIELDS))] = draw(WRONG)
        elif kind == "drop node key":
            node.pop(draw(st.sampled_from(NODE_FIELDS)), None)
        elif kind == "drop top key":
            tree.pop(draw(st.sampled_from(TOP_FIELDS)), None)
        elif kind == "duplicate node":
            nodes.append(copy.deepcopy(node))
        elif kind == "cycle":  # a node hangs from one of its own descendants (or itself)
            other = draw(st.sampled_from(nodes))
            if isinstance(other, dict):
                node["parent"] = other.get("id")
                if isinstance(other.get("children"), list):
                    other["children"].append(node.get("id"))
        elif kind == "unknown child":
            if isinstance(node.get("children"), list):
                node["children"].append(draw(st.integers(-5, 2**40)))
    return tree


def import_and_check(tmp_path: Path, text: str, name: str = "fuzzed") -> int:
    """``loomterm import`` the text; the result is a session every exporter reads, or
    one line; the file is unchanged. Returns the exit code."""
    source = tmp_path / "tree.json"
    source.write_text(text, encoding="utf-8")
    before = digest(source)
    code, out, err = run_cli(["import", str(source), "--name", name])
    assert_clean_end(code, err, allowed=(0, 1))
    assert digest(source) == before
    if code == 0:  # what the editor and every exporter build on reads back
        load_session(name)
        for fmt in export.FORMATS:
            code_out, _, err_out = run_cli(["export", name, "--format", fmt])
            assert_clean_end(code_out, err_out, allowed=(0, 1))
            assert code_out == 0 or fmt == "jsonl", err_out  # jsonl: perhaps no pairs
    return code


@pytest.fixture
def fresh(tmp_path, isolated_dirs, monkeypatch):
    """Each example its own sessions folder (an example may leave a session behind)."""
    counter = iter(range(10**9))

    def next_dir() -> Path:
        folder = tmp_path / f"ex{next(counter)}"
        folder.mkdir()
        monkeypatch.setenv("LOOMTERM_DATA_DIR", str(folder / "data"))
        return folder

    return next_dir


@budget(30)
@given(tree=valid_trees())
def test_valid_trees_import_and_export(fresh, tree):
    assert import_and_check(fresh(), dumps(tree)) == 0


@budget(150)
@given(tree=mutated_trees())
def test_mutated_trees_end_in_a_session_or_one_line(fresh, tree):
    import_and_check(fresh(), dumps(tree))


@st.composite
def socketteer_nodes(draw, depth: int = 0) -> Any:
    """A socketteer/loom node, often with a wrong field somewhere."""
    node: dict[str, Any] = {"text": draw(TEXT | WRONG if draw(st.booleans()) else TEXT)}
    if draw(st.booleans()):
        node["id"] = draw(TEXT | HOSTILE)
    if draw(st.booleans()):
        node["meta"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "source": st.sampled_from(["prompt", "AI", "mixed"]) | HOSTILE,
                    "creation_timestamp": st.sampled_from(
                        ["2024-01-02-03.04.05", "9999-99-99-99.99.99", "<1e999>"]
                    )
                    | HOSTILE,
                },
            )
            | HOSTILE
        )
    if draw(st.booleans()):
        node["tags"] = draw(st.lists(TEXT) | HOSTILE)
    if depth < 3:
        node["children"] = draw(
            st.lists(socketteer_nodes(depth + 1), max_size=3) | HOSTILE
            if draw(st.integers(0, 9)) == 0
            else st.lists(socketteer_nodes(depth + 1), max_size=3)
        )
    return node


@st.composite
def socketteer_trees(draw) -> Any:
    root = draw(socketteer_nodes())
    shape = draw(st.sampled_from(["wrapped", "bare", "list"]))
    if shape == "list":
        return draw(st.lists(socketteer_nodes(1), max_size=3))
    if shape == "bare":
        return root
    return {"root": root, "selected_node_id": draw(st.none() | TEXT | HOSTILE)}


@budget(200)
@given(tree=socketteer_trees())
def test_socketteer_trees_read_as_a_text_tree_or_one_line(tmp_path, tree):
    """socketteer's trees need a model to become a session (their text is tokenized):
    the reader is what is fuzzed here, and a text tree it gives is consistent."""
    path = tmp_path / "sock.json"
    path.write_text(dumps(tree), encoding="utf-8")
    before = digest(path)
    try:
        text = read_import(path)
    except ExportError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert isinstance(text, export.TextTree)
        assert set(text.parents) == set(text.texts) == set(text.children)
        assert all(isinstance(t, str) for t in text.texts.values())
        assert text.cursor in text.parents
    assert digest(path) == before


DEEP = 10_000


@pytest.mark.parametrize(
    "text",
    [
        "[" * DEEP + "]" * DEEP,
        '{"a":' * DEEP + "1" + "}" * DEEP,
        json.dumps({"format": "loomterm-tree", "version": 1})[:-1]
        + ', "nodes": '
        + "[" * DEEP
        + "]" * DEEP
        + "}",
        '{"text": "a", "children": [' * DEEP + "]}" * DEEP,
    ],
    ids=["arrays", "objects", "loomterm-nodes", "socketteer-chain"],
)
def test_json_nested_ten_thousand_levels_is_one_line(tmp_path, text):
    assert import_and_check(tmp_path, text) == 1


def test_a_token_id_of_1e999_names_the_field(tmp_path):
    obj = {
        "format": "loomterm-tree",
        "version": 1,
        "model": {"name": "m", "fingerprint": FINGERPRINT},
        "nodes": [
            {"id": 0, "parent": None, "children": [1], "tokens": [], "pieces": []},
            {"id": 1, "parent": 0, "tokens": ["<1e999>"], "pieces": ["a"]},
        ],
    }
    source = tmp_path / "huge.json"
    source.write_text(dumps(obj))
    code, _, err = run_cli(["import", str(source)])
    assert code == 1 and "node 1: tokens[0] must be a token id" in err
    assert err.count("\n") == 1


def test_a_huge_string_field_imports(fresh):
    """A 20 MB piece is data, not an attack: it imports and reads back whole."""
    obj = {
        "format": "loomterm-tree",
        "version": 1,
        "model": {"name": "m", "fingerprint": FINGERPRINT},
        "nodes": [
            {"id": 0, "parent": None, "children": [1], "tokens": [], "pieces": []},
            {"id": 1, "parent": 0, "tokens": [5], "pieces": ["\u00e9" * 10_000_000]},
        ],
    }
    folder = fresh()
    assert import_and_check(folder, json.dumps(obj)) == 0
    assert load_session("fuzzed").pieces[1] == ["\u00e9" * 10_000_000]


def test_the_fuzzer_finds_what_the_checks_refuse(tmp_path):
    """The property can fail: a tree the checks refuse is refused (one line), not
    accepted, so the property above is not vacuous."""
    bad = {"format": "loomterm-tree", "version": 1, "nodes": [{"id": True}]}
    assert import_and_check(tmp_path, json.dumps(bad)) == 1
