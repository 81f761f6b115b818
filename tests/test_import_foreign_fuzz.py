"""Every foreign reader takes any JSON: a tree, or one line saying why not, never a
traceback. Near-valid files are built from each tool's shape and their fields replaced
with anything JSON holds."""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomterm.export import TextTree, read_import
from loomterm.export.errors import ExportError

EXAMPLES = int(os.environ.get("LOOMTERM_FUZZ_EXAMPLES", "60"))

anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),  # fmt: skip
    max_leaves=12,
)

SHAPES = [
    {
        "prompt": "a",
        "actions": ["b"],
        "actions_metadata": {"0": {"Alternative Text": [{"Text": "c"}]}},
        "altbranches": [None, ["a", "d"]],
        "worldinfo": [{"key": "k", "content": "v"}],
        "memory": "m",
        "authorsnote": "n",
        "anotetemplate": "[<|>]",
    },  # fmt: skip
    {
        "file_version": 2,
        "prompt": "a",
        "actions": {"actions": {"0": {"Selected Text": "b", "Options": [{"text": "c"}]}}},
        "worldinfo_v2": {"entries": {"0": {"key": ["k"], "content": "v"}}},
    },  # fmt: skip
    {"ga": ["a", "b"], "cm": "m", "ca": "n", "ct": "[<|>]", "cwi": [{"key": "k", "content": "v"}]},
    {
        "internal": [["<|BEGIN-VISIBLE-CHAT|>", "hi"], ["u", "a"]],
        "visible": [],
        "metadata": {"assistant_1": {"versions": [{"content": "b"}]}},
    },  # fmt: skip
    {
        "prompt": [{"type": "user", "content": "a"}, {"content": "b"}],
        "memoryTokens": {"text": "m"},
        "authorNoteTokens": {"text": "n"},
        "worldInfo": {"entries": [{"keys": ["k"], "text": "v"}]},
        "endpointAPIKey": "x",
    },  # fmt: skip
    {
        "Sessions": [{"key": 0, "value": {"prompt": [{"content": "a"}]}}],
        "Names": [{"key": 0, "value": "s"}],
    },  # fmt: skip
    {
        "current": "a",
        "nodes": {"a": {"text": "x", "parentId": None}, "b": {"text": "y", "parentId": "a"}},
    },  # fmt: skip
    {
        "settings": {},
        "state": {"n.md": {"current": "a", "nodes": {"a": {"text": "x", "parentId": None}}}},
    },  # fmt: skip
    {
        "loomType": "Exoloom",
        "tree": {
            "rootNodeId": 1,
            "nodes": {
                "1": {"content": "a", "childrenIds": [2]},
                "2": {"content": "b", "childrenIds": []},
            },
        },
        "lens": {"bookmarks": [{"nodeId": 2}], "prunedNodes": []},
    },  # fmt: skip
]


def mutate(value, path_choices, replacement):
    """``value`` with the field at one path replaced by ``replacement``."""
    if not path_choices or not isinstance(value, (dict, list)) or not value:
        return replacement
    keys = list(value) if isinstance(value, dict) else list(range(len(value)))
    key = keys[path_choices[0] % len(keys)]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[key] = mutate(value[key], path_choices[1:], replacement)
    return copy


def check(tmp_path, text: str) -> None:
    path = tmp_path / "in.json"
    path.write_text(text, encoding="utf-8")
    before = path.read_bytes()
    try:
        result = read_import(path)
    except ExportError as exc:
        assert "\n" not in str(exc)
    else:
        if isinstance(result, TextTree):
            assert result.cursor in result.parents
            assert all(isinstance(t, str) for t in result.texts.values())
    assert path.read_bytes() == before


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    shape=st.sampled_from(SHAPES),
    where=st.lists(st.integers(0, 50), min_size=1, max_size=5),
    replacement=anything,
)
def test_near_valid_files_of_every_tool_never_crash(tmp_path, shape, where, replacement):
    check(tmp_path, json.dumps(mutate(shape, where, replacement)))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(lines=st.lists(anything, min_size=1, max_size=5), header=st.booleans())
def test_any_json_lines_never_crash(tmp_path, lines, header):
    if header:
        lines = (
            [{"user_name": "u", "character_name": "c", "chat_metadata": lines[0]}]
            + [
                {
                    "mes": line,
                    "name": line,
                    "swipes": line,
                    "swipe_id": line,
                    "send_date": line,
                    "extra": line,
                }  # fmt: skip
                for line in lines[1:]
            ]
        )
    check(tmp_path, "\n".join(json.dumps(line) for line in lines))


TAPESTRY = {
    "identifier": "W",
    "models": [["M", {"label": "m"}]],
    "nodes": [["R", {"content": "a"}], ["A", {"content": [[0.5, "b"]], "model": "M"}]],
    "rootNodes": ["R"],
    "nodeChildren": [["R", ["A"]]],
    "currentNode": "A",
    "bookmarks": ["A"],
}


def as_serialized(value) -> str:
    """``value`` as serialize-javascript writes a WeaveDocument: pair lists as Maps."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(p, list) and len(p) == 2 for p in value)
    ):
        return "new Map([" + ",".join("[" + ",".join(as_serialized(x) for x in p) + "]" for p in value) + "])"  # fmt: skip
    if isinstance(value, list):
        return "new Set([" + ",".join(as_serialized(x) for x in value) + "])"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{as_serialized(v)}" for k, v in value.items()) + "}"  # fmt: skip
    return json.dumps(value)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    where=st.lists(st.integers(0, 50), min_size=1, max_size=5),
    replacement=anything,
    cut=st.integers(0, 400),
    noise=st.text(max_size=6),
)
def test_near_valid_tapestry_notes_never_crash(tmp_path, where, replacement, cut, noise):
    serialized = as_serialized(mutate(TAPESTRY, where, replacement))
    serialized = serialized[:cut] + noise + serialized[cut:]
    check(tmp_path, f"---\nTapestryLoomWeave: {json.dumps(serialized)}\n---\n")
