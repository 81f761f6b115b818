"""Files of the tools loom users come from, imported by their content.

The real files are read from ``../shared/data/looms/`` (third-party: never copied into
the project; each test skips with the reason when the folder is absent). mikupad,
loomsidian and exoloom have no public file anywhere (that folder's FORMAT.md files say
where each format is defined): their tests build files in the shapes those tools'
code writes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from loomterm.cli import main
from loomterm.export import TextTree, read_import
from loomterm.export.errors import ExportError
from loomterm.sessions.session import import_session, load_session
from loomterm.tree import Origin

LOOMS = Path(__file__).resolve().parents[2] / "shared" / "data" / "looms"


def real(relative: str) -> Path:
    path = LOOMS / relative
    if not path.is_file():
        pytest.skip(f"{path} is absent (the third-party loom files live in ../shared/data/looms)")
    return path


def path_text(tree: TextTree, node: int | None = None) -> str:
    node = tree.cursor if node is None else node
    parts = []
    while node is not None:
        parts.append(tree.texts[node])
        node = tree.parents[node]
    return "".join(reversed(parts))


def leaves(tree: TextTree) -> list[int]:
    return [n for n, kids in tree.children.items() if not kids and n != tree.root]


# -- KoboldAI ---------------------------------------------------------------------------


def test_a_koboldai_client_save_is_its_story_with_memory_and_note():
    tree = read_import(real("koboldai/sample_story.json"))
    source = json.loads(real("koboldai/sample_story.json").read_text(encoding="utf-8"))
    assert tree.tool == "KoboldAI"
    assert path_text(tree) == source["prompt"] + "".join(source["actions"])
    assert len(tree.parents) - 1 == 1 + len(source["actions"])
    first = tree.children[0][0]
    assert tree.origins[first] is Origin.USER and tree.texts[first] == source["prompt"]
    assert tree.settings["memory"] == source["memory"]
    assert tree.settings["authors_note"] == source["authorsnote"]
    assert tree.notices == []


def test_the_first_koboldai_save_drops_its_local_folder():
    tree = read_import(real("koboldai/sample_story.initial-4bd00b9.json"))
    assert "authors_note" not in tree.settings
    assert "savedir" not in json.dumps(tree.settings)


def test_a_koboldai_scenario_brings_its_world_info():
    path = real("koboldai/half_life_2_start_20210621.json")
    source = json.loads(path.read_text(encoding="utf-8"))
    tree = read_import(path)
    entries = tree.settings["world_info"]["entries"]
    assert len(entries) == len(source["worldinfo"]) == 25
    assert entries[0]["keys"] == [k.strip() for k in source["worldinfo"][0]["key"].split(",")]
    assert entries[0]["text"] == source["worldinfo"][0]["content"]
    assert path_text(tree) == source["prompt"]  # curly quotes and "${}" kept as they are


def test_koboldai_retries_and_lite_branches_become_siblings(tmp_path):
    save = {
        "gamestarted": True,
        "prompt": "The ship",
        "memory": "",
        "authorsnote": "dark",
        "anotetemplate": "[Author's note: <|>]",
        "actions": [" sailed", " north."],
        "actions_metadata": {
            "0": {
                "Selected Text": " sailed",
                "Alternative Text": [{"Text": " sank", "Pinned": False}],
            },  # fmt: skip
            "1": {"Selected Text": " north.", "Alternative Text": []},
        },
        "altbranches": [None, ["The ship", " sailed", " south."]],
        "savedsettings": {"my_api_key": "sk-live-canary", "saved_oai_key": "sk-canary-2"},
        "worldinfo": [
            {"key": "ship, boat", "content": "A brig.", "keysecondary": ""},
            {"key": "", "content": "no key"},
            {"key": "ship", "content": "A ghost ship.", "widisabled": True},
        ],  # fmt: skip
    }
    path = tmp_path / "story.json"
    path.write_text(json.dumps(save), encoding="utf-8")
    tree = read_import(path)
    assert path_text(tree) == "The ship sailed north."
    texts = sorted(path_text(tree, leaf) for leaf in leaves(tree))
    assert texts == ["The ship sailed north.", "The ship sailed south.", "The ship sank"]
    assert len(tree.parents) - 1 == 5  # the shared beginning is shared
    assert tree.settings["authors_note"] == "[Author's note: dark]"
    assert tree.settings["world_info"]["entries"] == [{"keys": ["ship", "boat"], "text": "A brig."}]
    assert any("saved settings" in n for n in tree.notices)
    assert any("without keys or text" in n for n in tree.notices)
    assert any("1 world info entry marked disabled" in n for n in tree.notices)
    assert "canary" not in repr(tree)


def test_koboldai_united_options_are_siblings_and_pickles_are_never_loaded(tmp_path):
    import base64
    import pickle

    class Boom:
        def __reduce__(self):
            return (Path(tmp_path / "ran").touch, ())

    pickled = "base64:" + base64.b64encode(pickle.dumps(Boom())).decode()
    save = {
        "file_version": 2,
        "prompt": "Once",
        "memory": pickled,
        "authornote": "",
        "actions": {
            "action_count": 2,
            "actions": {
                "0": {"Selected Text": " upon", "Options": [{"text": " more", "Pinned": False}]},
                "1": {"Selected Text": " a time.", "Options": []},
            },
        },
        "worldinfo_v2": {"entries": {"0": {"uid": 0, "key": ["time"], "content": "Long ago."}}},
    }
    path = tmp_path / "story.json"
    path.write_text(json.dumps(save), encoding="utf-8")
    tree = read_import(path)
    assert path_text(tree) == "Once upon a time."
    assert sorted(path_text(tree, leaf) for leaf in leaves(tree)) == ["Once more", "Once upon a time."]  # fmt: skip
    assert tree.settings["world_info"]["entries"] == [{"keys": ["time"], "text": "Long ago."}]
    assert "memory" not in tree.settings
    assert any("pickled" in n for n in tree.notices)
    assert not (tmp_path / "ran").exists()


# -- SillyTavern ------------------------------------------------------------------------


def test_a_sillytavern_chat_is_a_transcript_with_authors():
    path = real("sillytavern/Megumin_1673323621108.151bcde.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    tree = read_import(path)
    assert tree.tool == "SillyTavern"
    messages = lines[1:]
    assert len(tree.parents) - 1 == len(messages) == 3
    expected = "\n".join(f"{m['name']}: {m['mes']}" for m in messages)
    assert path_text(tree) == expected
    origins = [tree.origins[n] for n in sorted(tree.parents) if n]
    assert origins == [Origin.MODEL, Origin.USER, Origin.MODEL]
    first = sorted(tree.parents)[1]
    assert time.localtime(tree.created[first])[:3] == (2023, 4, 21)  # "2023-4-21 @20h ..."


@pytest.mark.parametrize(
    "name",
    ["Aqua_1673181146000.jsonl", "Darkness_1673225255706.jsonl", "Megumin_1673323621108.jsonl"],
)
def test_the_shipped_sillytavern_greetings_import(name):
    path = real(f"sillytavern/{name}")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    tree = read_import(path)
    assert path_text(tree) == f"{lines[1]['name']}: {lines[1]['mes']}"
    node = tree.children[0][0]
    assert time.gmtime(tree.created[node]).tm_year == 2023  # epoch milliseconds


def test_sillytavern_swipes_become_siblings_and_the_chosen_one_goes_on(tmp_path):
    lines = [
        {
            "user_name": "You",
            "character_name": "Ada",
            "create_date": 1700000000000,
            "chat_metadata": {
                "note_prompt": "Keep it short.",
                "note_depth": 2,
                "world_info": "Ada's world",
            },
        },  # fmt: skip
        {"name": "You", "is_user": True, "send_date": 1700000001000, "mes": "Hello?"},
        {
            "name": "Ada",
            "is_user": False,
            "send_date": "2024-01-02T03:04:05.000Z",
            "mes": "Hi.",
            "swipes": ["Go away.", "Hi.", "Who?"],
            "swipe_id": 1,
            "extra": {"model": "llama-3"},
        },  # fmt: skip
        {"name": "You", "is_user": True, "send_date": "September 28, 2024 1:02am", "mes": "Bye."},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    tree = read_import(path)
    assert path_text(tree) == "You: Hello?\nAda: Hi.\nYou: Bye."
    assert sorted(path_text(tree, leaf) for leaf in leaves(tree)) == [
        "You: Hello?\nAda: Go away.",
        "You: Hello?\nAda: Hi.\nYou: Bye.",
        "You: Hello?\nAda: Who?",
    ]
    assert tree.settings["authors_note"] == "Keep it short."
    assert tree.settings["authors_note_depth"] == 2
    assert any("Ada's world" in n for n in tree.notices)


# -- text-generation-webui --------------------------------------------------------------


@pytest.mark.parametrize("name", ["Example_persistent.json", "persistent.json"])
def test_a_textgen_history_imports_the_models_text_not_the_html(name):
    path = real(f"text-generation-webui/{name}")
    source = json.loads(path.read_text(encoding="utf-8"))
    tree = read_import(path)
    assert tree.tool == "text-generation-webui"
    text = path_text(tree)
    assert "<audio" not in text
    rows = source["data"]
    assert text.endswith(f"Assistant: {rows[-1][1]}")
    greeting = rows[0][0] == "<|BEGIN-VISIBLE-CHAT|>"
    assert len(tree.parents) - 1 == 2 * len(rows) - greeting
    assert text.startswith("Assistant: " if greeting else f"You: {rows[0][0]}")


def test_textgen_versions_become_siblings(tmp_path):
    history = {
        "internal": [["Hi", "Hello!"], ["Tell a joke", "No."]],
        "visible": [["Hi", "Hello!"], ["Tell a joke", "No."]],
        "metadata": {
            "assistant_1": {
                "timestamp": "Jan 01, 2026 10:00",
                "versions": [{"content": "A pun."}, {"content": "No."}],
                "current_version_index": 1,
            }
        },  # fmt: skip
    }
    path = tmp_path / "20260101-10-00-00.json"
    path.write_text(json.dumps(history, indent=4), encoding="utf-8")
    tree = read_import(path)
    assert path_text(tree) == "You: Hi\nAssistant: Hello!\nYou: Tell a joke\nAssistant: No."
    assert "You: Hi\nAssistant: Hello!\nYou: Tell a joke\nAssistant: A pun." in {
        path_text(tree, leaf) for leaf in leaves(tree)
    }


# -- mikupad, loomsidian, exoloom (no public file exists: built in their code's shapes) --


def mikupad_session(key: str = "sk-mikupad-canary") -> dict:
    return {
        "name": "Tale",
        "prompt": [
            {"type": "user", "content": "The lighthouse"},
            {
                "content": " keeper",
                "prob": 0.4,
                "completion_probabilities": [
                    {"content": " keeper", "probs": [{"tok_str": " keeper", "prob": 0.4}]}
                ],
            },  # fmt: skip
            {"content": " slept.", "prob": 0.2},
            {"type": "user", "content": " Then"},
        ],
        "memoryTokens": {
            "contextOrder": "{memPrefix}{memText}{memSuffix}{prompt}",
            "prefix": "",
            "text": "A cold coast.",
            "suffix": "\n",
        },  # fmt: skip
        "authorNoteTokens": {"prefix": "[", "text": "gloomy", "suffix": "]"},
        "authorNoteDepth": 2,
        "worldInfo": {
            "mikuPediaVersion": 1,
            "entries": [
                {"displayName": "Keeper", "text": "Old Tom.", "keys": ["keeper"], "search": ""}
            ],
            "prefix": "",
            "suffix": "",
        },  # fmt: skip
        "endpoint": "http://10.0.0.5:8080",
        "endpointAPIKey": key,
        "temperature": 0.7,
    }


def test_a_mikupad_session_export_is_read_through_its_second_encoding(tmp_path):
    session = mikupad_session()
    encoded = {key: (value if key == "name" else json.dumps(value)) for key, value in session.items()}  # fmt: skip
    path = tmp_path / "Tale.json"
    path.write_text(json.dumps(encoded), encoding="utf-8")
    tree = read_import(path)
    assert tree.tool == "mikupad"
    assert path_text(tree) == "The lighthouse keeper slept. Then"
    nodes = [n for n in sorted(tree.parents) if n]
    assert [tree.origins[n] for n in nodes] == [Origin.USER, Origin.MODEL, Origin.USER]
    assert tree.settings["memory"] == "A cold coast."
    assert tree.settings["authors_note"] == "[gloomy]"
    assert tree.settings["authors_note_depth"] == 2
    assert tree.settings["world_info"]["entries"] == [{"keys": ["keeper"], "text": "Old Tom."}]
    assert any("API key" in n for n in tree.notices)
    assert "canary" not in repr(tree)


def test_a_mikupad_database_export_makes_a_branch_per_session(tmp_path):
    other = mikupad_session("") | {"prompt": [{"type": "user", "content": "Second story."}]}
    db = {
        "Sessions": [
            {"key": 0, "value": mikupad_session()},
            {"key": 1, "value": other},
            {"key": "selectedSessionId", "value": 1},
        ],
        "Names": [{"key": 0, "value": "Tale"}, {"key": 1, "value": "Other"}],
        "Templates": [],
    }
    path = tmp_path / "mikupad_db_export.json"
    path.write_text(json.dumps(db, indent=2), encoding="utf-8")
    tree = read_import(path)
    tops = tree.children[0]
    assert [tree.meta[n]["imported_name"] for n in tops] == ["Tale", "Other"]
    assert sorted(path_text(tree, leaf) for leaf in leaves(tree)) == ["Second story.", "The lighthouse keeper slept. Then"]  # fmt: skip
    assert "canary" not in repr(tree)
    assert any("first session's memory" in n for n in tree.notices)
    assert path_text(tree) == "Second story."  # the session mikupad had open
    db["Sessions"][2]["value"] = 0
    path.write_text(json.dumps(db, indent=2), encoding="utf-8")
    assert path_text(read_import(path)) == "The lighthouse keeper slept. Then"


def loomsidian_note() -> dict:
    return {
        "current": "c",
        "hoisted": [],
        "searchTerm": "",
        "generating": None,
        "nodes": {
            "b": {
                "text": " went out",
                "parentId": "a",
                "collapsed": False,
                "unread": False,
                "bookmarked": True,
            },  # fmt: skip
            "a": {
                "text": "The light",
                "parentId": None,
                "collapsed": False,
                "unread": False,
                "bookmarked": False,
            },  # fmt: skip
            "c": {
                "text": " burned on",
                "parentId": "a",
                "collapsed": False,
                "unread": True,
                "bookmarked": False,
            },  # fmt: skip
            "x": {
                "text": "loop",
                "parentId": "y",
                "collapsed": False,
                "unread": False,
                "bookmarked": False,
            },  # fmt: skip
            "y": {
                "text": "loop",
                "parentId": "x",
                "collapsed": False,
                "unread": False,
                "bookmarked": False,
            },  # fmt: skip
        },
    }


def test_a_loomsidian_data_file_keeps_order_marks_and_drops_its_settings(tmp_path):
    data = {
        "settings": {
            "modelPresets": [
                {"name": "gpt", "apiKey": "sk-loomsidian-canary", "url": "https://api.example"}
            ],
            "openaiApiKey": "sk-old-canary",
        },  # fmt: skip
        "state": {"Stories/Light.md": loomsidian_note()},
    }
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    tree = read_import(path)
    assert tree.tool == "loomsidian"
    assert path_text(tree) == "The light burned on"
    top = tree.children[0][0]
    assert [tree.texts[k] for k in tree.children[top]] == [" went out", " burned on"]  # file order
    went, burned = tree.children[top]
    assert tree.meta[went]["bookmark"] is True and tree.meta[burned]["unread"] is True
    assert any("settings" in n for n in tree.notices)
    assert any("loop" in n for n in tree.notices)
    assert "canary" not in repr(tree)


def test_another_plugin_called_loom_is_not_taken_for_loomsidian(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"enableLocalExecution": True, "settings": {}}), encoding="utf-8")
    with pytest.raises(ExportError, match="not a format loomterm knows"):
        read_import(path)


def test_an_exoloom_export_keeps_child_order_authors_bookmarks_and_pruning(tmp_path):
    export = {
        "loomType": "Exoloom",
        "version": "1.4.0",
        "schemaVersion": 1,
        "tree": {
            "title": "Harbor",
            "rootNodeId": 1,
            "nodes": {
                "1": {
                    "content": "At the harbor",
                    "authorType": "USER",
                    "authorName": None,
                    "parentId": None,
                    "childrenIds": [3, 2],
                    "createdAt": "2025-12-01T10:00:00Z",
                },  # fmt: skip
                "2": {
                    "content": ", gulls.",
                    "authorType": "LLM",
                    "authorName": "llama-3.1-405b",
                    "parentId": 1,
                    "childrenIds": [],
                    "createdAt": None,
                },  # fmt: skip
                "3": {
                    "content": ", fog.",
                    "authorType": "LLM",
                    "authorName": "llama-3.1-405b",
                    "parentId": 1,
                    "childrenIds": [],
                    "createdAt": None,
                },  # fmt: skip
            },
        },
        "lens": {"bookmarks": [{"nodeId": 2}], "prunedNodes": [{"nodeId": 3}]},
    }
    path = tmp_path / "harbor.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    tree = read_import(path)
    assert tree.tool == "exoloom" and tree.name == "harbor"
    root = tree.children[0][0]
    assert [tree.texts[k] for k in tree.children[root]] == [", fog.", ", gulls."]
    fog, gulls = tree.children[root]
    assert tree.meta[gulls]["bookmark"] is True and tree.meta[fog]["hidden"] is True
    assert tree.meta[gulls]["imported_model"] == "llama-3.1-405b"
    assert tree.origins[root] is Origin.USER and tree.origins[gulls] is Origin.MODEL
    assert time.gmtime(tree.created[root]).tm_year == 2025


def test_a_tapestry_weave_is_refused_in_one_line():
    path = real("tapestry-loom/welcome.tapestry")
    with pytest.raises(ExportError) as caught:
        read_import(path)
    assert "Tapestry" in str(caught.value) and "binary" in str(caught.value)
    assert "\n" not in str(caught.value)


# Tapestry Loom's Obsidian plugin (its ``legacy`` branch, 2025) kept the weave in a note's
# front matter, written by serialize-javascript. No such note is public (the code index
# holds none), so these tests build notes in the shape that code writes: ``js`` is
# serialize-javascript's output for the plugin's ``WeaveDocument`` (Maps and Sets as
# constructors, ``<``, ``>`` and ``/`` escaped, an unset field ``undefined``).


class JsMap(dict):
    pass


class JsSet(list):
    pass


UNDEFINED = object()


def js(value) -> str:
    if value is UNDEFINED:
        return "undefined"
    if isinstance(value, JsMap):
        return "new Map([" + ",".join(f"[{js(k)},{js(v)}]" for k, v in value.items()) + "])"
    if isinstance(value, JsSet):
        return "new Set([" + ",".join(js(v) for v in value) + "])"
    if isinstance(value, dict):
        return "{" + ",".join(f"{js(k)}:{js(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(js(v) for v in value) + "]"
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003C").replace(">", "\\u003E").replace("/", "\\u002F")


def tapestry_weave(current="C") -> dict:
    """A weave: the writer's root, two model branches (one as tokens, bookmarked), a
    child under one, and text that looks like the constructors inside strings."""
    node = lambda ident, content, parent=None, model=None: {  # noqa: E731
        "identifier": ident,
        "content": content,
        **({"model": model} if model else {}),
        **({"parentNode": parent} if parent else {}),
    }  # fmt: skip
    return {
        "identifier": "W",
        "models": JsMap({"M": {"label": "llama-3-70b", "color": "#ff0000"}}),
        "modelNodes": JsMap({"M": JsSet(["A", "B", "C"])}),
        "nodes": JsMap(
            {
                "R": node("R", "The map said new Map([1]) undefined) </script>"),
                "A": node("A", [[0.5, " and"], [0.25, " then"]], "R", "M"),
                "B": node("B", " or else", "R", "M"),
                "C": node("C", " it rained.", "A", "M"),
            }
        ),
        "rootNodes": JsSet(["R"]),
        "nodeChildren": JsMap({"R": JsSet(["A", "B"]), "A": JsSet(["C"])}),
        "currentNode": current,
        "bookmarks": JsSet(["B"]),
    }


def tapestry_note(weave: dict, compressed: bool = False) -> str:
    import base64
    import zlib

    import yaml

    serialized = js(weave)
    if compressed:
        packed = base64.b64encode(zlib.compress(serialized.encode("utf-8"))).decode("ascii")
        front = {"tags": ["story"], "TapestryLoomWeaveCompressed": packed}
    else:
        front = {"tags": ["story"], "TapestryLoomWeave": serialized}
    return "---\n" + yaml.safe_dump(front) + "---\nThe map said...\n"


@pytest.mark.parametrize("compressed", [False, True])
def test_a_tapestry_obsidian_note_imports_its_weave_without_running_it(tmp_path, compressed):
    path = tmp_path / "Story.md"
    path.write_text(tapestry_note(tapestry_weave(), compressed), encoding="utf-8")
    tree = read_import(path)
    assert tree.tool.startswith("Tapestry Loom")
    assert path_text(tree) == "The map said new Map([1]) undefined) </script> and then it rained."
    [root] = tree.children[tree.root]
    assert tree.origins[root] is Origin.USER
    a, b = tree.children[root]
    assert [tree.texts[a], tree.texts[b]] == [" and then", " or else"]
    assert tree.origins[a] is Origin.MODEL and tree.meta[a]["imported_model"] == "llama-3-70b"
    assert tree.meta[b]["bookmark"] is True and "bookmark" not in tree.meta[a]
    assert tree.cursor == tree.children[a][0]


def test_a_tapestry_note_with_no_current_node_follows_the_newest_branch(tmp_path):
    path = tmp_path / "Story.md"
    path.write_text(tapestry_note(tapestry_weave(current=UNDEFINED)), encoding="utf-8")
    tree = read_import(path)
    assert tree.texts[tree.cursor] == " or else"


def test_a_tapestry_note_holding_code_is_refused_and_never_run(tmp_path):
    flag = tmp_path / "ran"
    code = f'(function(){{require("fs").writeFileSync("{flag}", "x")}})()'
    path = tmp_path / "Story.md"
    path.write_text(f"---\nTapestryLoomWeave: {json.dumps(code)}\n---\n", encoding="utf-8")
    with pytest.raises(ExportError) as caught:
        read_import(path)
    assert "Tapestry Loom note" in str(caught.value) and "\n" not in str(caught.value)
    assert not flag.exists()


def test_a_tapestry_note_that_unpacks_too_far_is_refused(tmp_path, monkeypatch):
    from loomterm.export.foreign import tapestry

    monkeypatch.setattr(tapestry, "MAX_INFLATED", 64)
    path = tmp_path / "Story.md"
    path.write_text(tapestry_note(tapestry_weave(), compressed=True), encoding="utf-8")
    with pytest.raises(ExportError, match="unpacks to more than"):
        read_import(path)


def test_a_markdown_note_without_a_weave_is_not_taken_for_tapestry(tmp_path):
    path = tmp_path / "Note.md"
    path.write_text("---\ntags: [loom]\n---\nTapestryLoomWeave is a word here.\n", encoding="utf-8")
    with pytest.raises(ExportError, match="not JSON"):
        read_import(path)


# -- through the command line and into a session ----------------------------------------


def test_a_koboldai_save_becomes_a_session_on_the_command_line(tiny_llama_dir, capsys):
    path = real("koboldai/half_life_2_start_20210621.json")
    assert main(["import", str(path), "--model", str(tiny_llama_dir), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "from a KoboldAI file" in out
    data = load_session(path.stem)
    assert len(data.settings["world_info"]["entries"]) == 25
    source = json.loads(path.read_text(encoding="utf-8"))
    assert data.path_text() == source["prompt"]


def test_dropped_secrets_are_told_on_stderr_and_never_written(tiny_llama_dir, tmp_path, capsys):
    from loomterm.config.locations import sessions_dir

    session = mikupad_session()
    path = tmp_path / "Tale.json"
    path.write_text(json.dumps(session), encoding="utf-8")
    assert main(["import", str(path), "--model", str(tiny_llama_dir), "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "dropped the API key" in captured.err
    assert "canary" not in captured.out + captured.err
    for file in sessions_dir().iterdir():
        assert b"canary" not in file.read_bytes()
    assert load_session("Tale").path_text() == "The lighthouse keeper slept. Then"


def test_a_sillytavern_chat_session_holds_every_swipe(tiny_llama_dir, tmp_path):
    path = real("sillytavern/Megumin_1673323621108.151bcde.jsonl")
    data = import_session(read_import(path), "megumin", model=str(tiny_llama_dir), device="cpu")
    assert data.path_text() == path_text(read_import(path))
