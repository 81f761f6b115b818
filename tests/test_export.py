"""Export and import: every format round-trips, bad input and bad output fail cleanly."""

from __future__ import annotations

import errno
import html as html_mod
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from loomterm import export
from loomterm.cli import main
from loomterm.engine import Loom
from loomterm.export import ExportError, read_import, render, write_atomic
from loomterm.sessions.session import (
    close_session,
    import_session,
    load_session,
    save_loom,
    session_path,
)
from loomterm.store import SessionData, load
from loomterm.tree import Origin
from tests.helpers import ends_whole, make_loom, sample_tree, tree_record

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def loom(tiny_llama_dir) -> Iterator[Loom]:
    """A fresh loom on the tiny seeded Llama (it loads in milliseconds)."""
    loom = make_loom(tiny_llama_dir)
    loom.update_settings(token_healing="off")  # the sample's prompts end in a word
    yield loom
    close_session(loom)


@pytest.fixture
def sample(loom) -> tuple[Loom, SessionData]:
    sample_tree(loom)
    # A logprob of minus infinity must survive strict JSON (a real model's are finite).
    node = loom.tree.nodes[2]
    assert Origin(node.origin) is Origin.MODEL and node.logprobs
    node.logprobs[0] = float("-inf")
    node.top[0] = [(node.tokens[0], float("-inf")), (66, -1.0)]
    save_loom(loom, "sample")
    close_session(loom)
    return loom, load_session("sample")


# -- readers used by the tests --------------------------------------------------------


def markdown_runs(md: str) -> list[tuple[str, str]]:
    """(label, text) of each labelled block (chat turns, or runs with attribution),
    undoing ``export.inline`` on the label and ``export.prose`` on the text exactly
    (the last block's final newlines excepted: the file ends in one)."""
    heads = list(re.finditer(r"(?m)^\*\*((?:[^*\\\n]|\\.)+)\*\*[^\n]*\n\n", md))
    runs = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() - 2 if i + 1 < len(heads) else len(md.rstrip("\n"))
        label = re.sub(r"\\(.)", r"\1", head.group(1))
        text = re.split(r"\n\n#{2,3} ", md[head.end() : end])[0]  # up to a heading
        runs.append((label, export.unprose(text)))
    return runs


def unescaped(md: str) -> str:
    """``md`` with ``export.inline``'s escapes undone (for reading names back)."""
    return re.sub(r"\\(.)", r"\1", md).replace("&lt;", "<").replace("&amp;", "&")


def body_of(md: str) -> str:
    """A Markdown export past its title and facts."""
    return md.split("\n\n", 2)[2]


class DocText(HTMLParser):
    """Collects the text inside each ``<div class="doc">`` and every title attribute."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.docs: list[str] = []
        self.titles: list[str] = []
        self.depth = 0
        self.details = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "details":
            self.details += 1
        if "title" in attrs:
            self.titles.append(attrs["title"])
        if tag == "div" and attrs.get("class") == "doc":
            self.docs.append("")
            self.depth = 1
        elif self.depth and tag == "div":
            self.depth += 1

    def handle_endtag(self, tag):
        if self.depth and tag == "div":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.docs[-1] += data


# -- JSON -----------------------------------------------------------------------------


def test_json_round_trips_losslessly(sample, tmp_path):
    loom, data = sample
    text = render(data, "json")
    obj = json.loads(text)  # strict JSON: no bare Infinity
    assert obj["format"] == "loomterm-tree" and obj["version"] == 1
    by_id = {node["id"]: node for node in obj["nodes"]}
    assert by_id[2]["logprobs"][0] == "-inf" and by_id[2]["top"][0][0][1] == "-inf"
    back = export.from_json_dict(obj)
    assert isinstance(back, SessionData)
    assert tree_record(back.tree) == tree_record(data.tree) == tree_record(loom.tree)
    assert back.pieces == data.pieces
    assert back.vocab == data.vocab
    assert (back.cursor, back.settings, back.model) == (data.cursor, data.settings, data.model)
    assert (back.created, back.modified, back.name) == (data.created, data.modified, data.name)
    assert render(back, "json") == text


def test_json_through_the_command_line_needs_no_model(sample, tmp_path, capsys):
    loom, data = sample
    out = tmp_path / "tree.json"
    assert main(["export", "sample", "-o", str(out)]) == 0  # format from the suffix
    assert main(["import", str(out), "--name", "copy"]) == 0
    assert "imported" in capsys.readouterr().out
    copy = load_session("copy")
    assert tree_record(copy.tree) == tree_record(loom.tree)
    assert copy.pieces == data.pieces and copy.vocab == data.vocab
    assert (copy.cursor, copy.settings, copy.model) == (data.cursor, data.settings, data.model)
    # Import does not overwrite.
    assert main(["import", str(out), "--name", "copy"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_json_of_the_current_branch_holds_just_the_path(sample):
    _, data = sample
    obj = json.loads(render(data, "json", "current"))
    assert [n["id"] for n in obj["nodes"]] == [n.id for n in data.cursor_node.path()]
    back = export.from_json_dict(obj)
    assert back.path_text() == data.path_text()


def test_malformed_json_trees_are_refused_in_one_line(tmp_path):
    cases = {
        "not.json": "{nope",
        "other.json": json.dumps({"hello": 1}),
        "newer.json": json.dumps({"format": "loomterm-tree", "version": 99, "nodes": []}),
        "dangling.json": json.dumps(
            {
                "format": "loomterm-tree",
                "version": 1,
                "nodes": [{"id": 0, "parent": None, "children": [5], "text": ""}],
            }
        ),
        "short.json": json.dumps(
            {
                "format": "loomterm-tree",
                "version": 1,
                "nodes": [
                    {"id": 0, "parent": None, "children": [1], "tokens": [], "pieces": []},
                    {"id": 1, "parent": 0, "tokens": [1, 2], "pieces": ["a"]},
                ],
            }
        ),
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(ExportError) as info:
            read_import(path)
        assert "\n" not in str(info.value) and name in str(info.value)


# -- Markdown -------------------------------------------------------------------------


def test_markdown_shows_who_wrote_what_and_the_exact_path(sample):
    _, data = sample  # a chat (its prompt has a role): its turns are labelled
    md = render(data, "md")
    runs = markdown_runs(md)
    assert "".join(text for _, text in runs) == data.path_text()
    assert [label for label, _ in runs] == ["User", "Model", "Edited"]  # chat roles + origins
    assert "bookmark\\: favourite" in md
    tokens = MarkdownIt().parse(md)
    assert not any(t.type == "blockquote_open" for t in tokens)  # prose, not quotes
    assert tokens[0].type == "heading_open"


@pytest.fixture
def diary(loom) -> tuple[SessionData, list[tuple[str, str]]]:
    """A session without chat roles: typed, generated and edited text (the edit holds
    Markdown and HTML), and the (author, text) of each part."""
    typed = loom.append(loom.root, "Dear diary,\n\n")
    reply = loom.generate(typed, 12, temperature=0.7, seed=8)[0]
    assert ends_whole(loom, reply)
    more = "today I learned\n# that hashes\n> and quotes <b>stay</b> &amp; text ![x](http://t/p)"
    edited = loom.splice(reply, reply.end, reply.end, more)
    loom.cursor = edited
    loom.set_meta(edited, bookmark="the <b>end</b>")
    save_loom(loom, "diary")
    close_session(loom)
    return load_session("diary"), [
        ("You", "Dear diary,\n\n"),
        ("Model", loom.decode(reply.tokens)),
        ("Edited", more),
    ]


def test_markdown_is_the_path_as_prose_by_default(diary):
    data, parts = diary
    md = render(data, "md")
    body = body_of(md)
    text, bookmarks = body.split("\n\n## Bookmarks\n\n")
    assert export.unprose(text) == data.path_text().rstrip("\n")
    assert "**You**" not in md and "**Model**" not in md  # no attribution
    assert bookmarks.startswith("- bookmark\\: the &lt;b\\>end&lt;\\/b\\>")
    page = MarkdownIt("gfm-like").render(md)
    # The writer's Markdown is Markdown (a heading, a quote); HTML shows as text and no
    # image is fetched.
    assert "<h1>that hashes</h1>" in page and "<blockquote>" in page
    assert "&lt;b&gt;stay&lt;/b&gt; &amp;amp;" in page
    assert "<b>" not in page and "<img" not in page


def test_markdown_with_attribution_labels_who_wrote_what(diary):
    data, parts = diary
    runs = markdown_runs(render(data, "md", attribution=True))
    assert runs == parts


def test_markdown_escapes_every_name_and_note(loom, tmp_path):
    """The session's name, the model's name, bookmark notes and the model legend show
    literally: no raw HTML, no link, no image, no bare URL made live."""
    hostile = "<script>alert(1)</script> [a](http://x.example) ![i](http://x.example/t.png) http://evil.example www.evil.example me@evil.example *b* `c`"
    first = loom.append(loom.root, "Once upon a time <script>x()</script> ")
    loom.set_meta(first, bookmark=hostile)
    loom.cursor = first
    save_loom(loom, tmp_path / "hostile.loom")
    close_session(loom)
    data = load(tmp_path / "hostile.loom")
    data.name = hostile
    data.model = {"name": hostile}
    data.models = {hostile: {"name": hostile}, "other": {"name": "x"}}
    renderer = MarkdownIt("gfm-like")
    live = renderer.render(f"x {hostile}")  # unescaped, every trick works
    assert all(tag in live for tag in ("<script>", "<a ", "<img", "http://evil.example</a>"))
    for branch in ("current", "all"):
        for attribution in (False, True):
            md = render(data, "md", branch, attribution=attribution)
            page = renderer.render(md)
            assert "<script" not in page and "<a " not in page and "<img" not in page
            assert hostile in unescaped(md)  # shown literally, every character kept
            assert "<script>" not in md


_TRICKY = st.sampled_from(
    [*"ab :/.@wht<>&;#!*_`[](){}|~-+=\\\"'\n\t", "www.", "http://", "&amp;", "&#65;"]
    + ["<a href=x>", "![", "](", "mailto:", "<script>", "-->", "\u00e9"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TRICKY, max_size=30).map("".join))
def test_an_escaped_name_shows_exactly_its_text_and_nothing_live(text):
    """Whatever a name holds, markdown-it (GitHub-like, with bare URLs made links)
    shows its characters and makes no tag of it; prose round-trips exactly."""
    page = MarkdownIt("gfm-like").render("x " + export.inline(text))
    assert "<a" not in page and "<img" not in page and "<script" not in page
    shown = html_mod.unescape(re.sub(r"<[^>]+>", "", page))
    flat = "".join(" " if ord(c) < 32 else c for c in text)
    assert " ".join(shown.split()) == " ".join(f"x {flat}".split())
    assert export.unprose(export.prose(text)) == text


def test_markdown_outline_shows_every_branch(sample):
    loom, data = sample
    md = render(data, "md", "all")
    text = export.unprose(md)
    for node in loom.tree.nodes.values():
        if node.tokens:
            assert data.text(node).strip("\n") in text, node
    assert "alternative 1 of 3" in md and "alternative 3 of 3" in md
    assert "current path" in md
    MarkdownIt().parse(md)


def test_markdown_of_a_chat_is_clean_turns(loom):
    """Roles, no template tokens, no empty blocks between turns; JSON keeps the tokens."""
    from loomterm.tui import chat

    tokenizer = loom.runner.tokenizer
    node = loom.root
    for role, text in chat.opening_turns(tokenizer, "Be brief.", "Hello there"):
        node = loom.append(node, text, **({"role": role} if role else {}))
    first = loom.generate(node, 10, temperature=0.0)[0]
    node = first
    written = loom.codec.written(loom.tokens(first))  # the template sees the markers
    for role, text in chat.next_turns(tokenizer, written, "Tell me more"):
        node = loom.append(node, text, **({"role": role} if role else {}))
    second = loom.generate(node, 8, temperature=0.0)[0]
    loom.set_meta(first, bookmark=True)
    loom.cursor = second
    save_loom(loom, "chat")
    close_session(loom)
    data = load_session("chat")

    md = render(data, "md")
    runs = markdown_runs(md)
    assert [label for label, _ in runs] == ["System", "User", "Assistant", "User", "Assistant"]
    assert runs[0][1] == "Be brief." and runs[1][1] == "Hello there"
    assert runs[3][1] == "Tell me more"
    assert runs[4][1] == export.strip_template(data.text(second)).strip("\n")
    assert "im_start" not in md and "im_end" not in md and "**You**" not in md
    assert "**Assistant** · bookmarked" in md  # the mark is on the first answer's turn
    assert "written by you" not in md
    outline = render(data, "md", "all")
    assert "im_start" not in outline and "**You**" not in outline
    # The markers are kept there as tokens, never as text.
    tree = json.loads(render(data, "json"))
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert sum(node["tokens"].count(im_start) for node in tree["nodes"]) == 5
    assert "<|im_start|>" not in json.dumps([node["text"] for node in tree["nodes"]])


def test_markdown_outline_keeps_a_parent_and_its_child_apart(loom):
    stem = loom.append(loom.root, "Once upon a time")
    child = loom.append(stem, " there lived a weaver.")
    loom.set_meta(child, bookmark=True)
    other = loom.append(loom.root, "A different start")
    loom.cursor = child
    save_loom(loom, "apart")
    close_session(loom)
    assert other.parent is loom.root
    md = render(load_session("apart"), "md", "all", attribution=True)
    runs = markdown_runs(md)
    assert ("You", "Once upon a time") in runs
    assert ("You", " there lived a weaver.") in runs
    heads = [line.strip() for line in md.splitlines() if line.strip().startswith("**")]
    assert heads.count("**You** · bookmarked") == 1
    # The current path too: the bookmarked node is its own block.
    current = markdown_runs(render(load_session("apart"), "md", attribution=True))
    assert current == [("You", "Once upon a time"), ("You", " there lived a weaver.")]
    # Without attribution: one piece of prose, the note listed after it.
    plain = body_of(render(load_session("apart"), "md"))
    assert (
        plain
        == "Once upon a time there lived a weaver.\n\n## Bookmarks\n\n- bookmarked, node 2: there lived a weaver\\.\n"
    )


# -- plain text -----------------------------------------------------------------------


def test_text_is_the_path_text_exactly_ending_in_a_newline(sample, capsys):
    _, data = sample
    assert not data.path_text().endswith("\n")
    assert render(data, "txt") == data.path_text() + "\n"
    assert main(["export", "sample", "--format", "txt"]) == 0
    assert capsys.readouterr().out == data.path_text() + "\n"


def test_text_ending_in_a_newline_gets_no_second_one(loom):
    loom.cursor = loom.append(loom.root, "A line.\n")
    save_loom(loom, "lines")
    close_session(loom)
    assert render(load_session("lines"), "txt") == "A line.\n"


def test_text_outline_lists_every_branch(sample):
    loom, data = sample
    txt = render(data, "txt", "all")
    for node in loom.tree.nodes.values():
        for line in data.text(node).split("\n"):
            assert line in txt
    assert "--- alternative 2 of 3" in txt


# -- HTML -----------------------------------------------------------------------------


def test_html_is_one_safe_page_with_the_tree_and_hover_probabilities(sample, tmp_path):
    loom, data = sample
    page = render(data, "html")
    parser = DocText()
    parser.feed(page)
    parser.close()
    assert parser.docs[0] == data.path_text()  # the current path, exactly
    assert parser.details == len([n for n in loom.tree.nodes.values() if n.parent]) - sum(
        1 for n in loom.tree.nodes.values() if n.parent and len(n.parent.children) == 1
    )
    assert any(title.startswith("p = ") for title in parser.titles)
    # Escaped, and nothing fetched from elsewhere.
    assert "<edit>" not in page and "&lt;edit&gt; &amp; &quot;quotes&quot;" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    out = tmp_path / "page.html"
    assert main(["export", "sample", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == page


# -- writing safely -------------------------------------------------------------------


def test_an_unwritable_output_is_one_line_and_leaves_nothing(sample, tmp_path, capsys):
    target = tmp_path / "missing" / "out.md"
    assert main(["export", "sample", "-o", str(target)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("loomterm: cannot write") and "\n" not in err
    assert not target.parent.exists()


def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_text("the old export")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ExportError, match="No space left on device"):
        write_atomic(target, "new text " * 1000)
    assert target.read_text() == "the old export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_exporting_a_damaged_session_fails_cleanly(tmp_path, capsys):
    session_path("bad").write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    assert main(["export", "bad"]) == 1
    err = capsys.readouterr().err.strip()
    assert "not a readable loomterm session" in err and "\n" not in err


def test_exporting_a_missing_session_suggests_names(sample, capsys):
    assert main(["export", "sampel"]) == 1
    assert "close matches: sample" in capsys.readouterr().err


def test_the_sessions_table(sample, capsys):
    loom, _ = sample
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "MODEL", "LAST", "CHANGE", "NODES", "PATH"]
    row = out[1].split()
    assert row[0] == "sample" and row[1] == loom.runner.loaded.name
    assert str(len(loom.tree.nodes) - 1) in row and f"{loom.cursor.end}" in row


def test_export_loads_no_model_and_no_ui(sample):
    code = (
        "import sys\n"
        "from loomterm.cli import main\n"
        "assert main(['export', 'sample', '--format', 'html']) == 0\n"
        "assert main(['sessions']) == 0\n"
        "bad = [m for m in ('torch', 'transformers', 'textual', 'rich') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


# -- socketteer/loom and text-only trees ----------------------------------------------

SOCKETTEER = {
    "root": {
        "mutable": False,
        "visited": True,
        "text": "",
        "id": "root-1",
        "children": [
            {
                "id": "a1",
                "text": "The weaver sat at her loom",
                "meta": {"source": "prompt", "creation_timestamp": "2023-02-13-21.00.30"},
                "children": [
                    {
                        "id": "b1",
                        "text": " and wove a story of the sea.",
                        "meta": {"source": "AI", "modified": False},
                        "tags": ["bookmark"],
                        "children": [],
                    },
                    {
                        "id": "b2",
                        "text": " \u2014 caf\u00e9 na\u00efve \U0001f600 \u2014",
                        "meta": {"source": "mixed"},
                        "children": [{"id": "c1", "text": "\nThe end.", "children": []}],
                    },
                ],
            }
        ],
    },
    "selected_node_id": "c1",
    "chapters": {},
    "generation_settings": {"temperature": 0.9},
}


def test_socketteer_trees_import_and_are_tokenized(tiny_llama_dir, tmp_path):
    source = tmp_path / "weaver.json"
    source.write_text(json.dumps(SOCKETTEER), encoding="utf-8")
    tree = read_import(source)
    assert isinstance(tree, export.TextTree)
    data = import_session(tree, "weaver", model=str(tiny_llama_dir), device="cpu", dtype="float32")
    nodes = {data.text(n): n for n in data.tree.nodes.values() if n.parent}
    assert set(nodes) == {
        "The weaver sat at her loom",
        " and wove a story of the sea.",
        " \u2014 caf\u00e9 na\u00efve \U0001f600 \u2014",
        "\nThe end.",
    }
    assert Origin(nodes["The weaver sat at her loom"].origin) is Origin.USER
    assert Origin(nodes[" and wove a story of the sea."].origin) is Origin.MODEL
    assert nodes[" and wove a story of the sea."].meta["bookmark"] is True
    assert Origin(nodes["\nThe end."].origin) is Origin.IMPORT
    assert data.path_text() == (
        "The weaver sat at her loom \u2014 caf\u00e9 na\u00efve \U0001f600 \u2014\nThe end."
    )
    assert all(n.tokens for n in nodes.values())
    assert data.model["source"] == str(tiny_llama_dir.resolve())


def test_socketteer_import_on_the_command_line(tiny_llama_dir, tmp_path, capsys):
    source = tmp_path / "tree.json"
    source.write_text(json.dumps(SOCKETTEER["root"]), encoding="utf-8")  # a bare root node
    assert main(["import", str(source), "--model", str(tiny_llama_dir), "--device", "cpu"]) == 0
    assert "into session 'tree'" in capsys.readouterr().out
    assert main(["export", "tree", "--format", "txt"]) == 0
    assert capsys.readouterr().out.endswith("\nThe end.\n")


def test_a_socketteer_import_starts_with_the_editors_samplers(tiny_llama_dir, tmp_path, capsys):
    """Another loom's tree carries no loomterm samplers: the session starts with those a
    new session gets (llama.cpp's), not the neutral temperature 1, top-p 1."""
    from loomterm.config.presets import SHIPPED
    from loomterm.sessions.session import load_session

    source = tmp_path / "tale.json"
    source.write_text(json.dumps(SOCKETTEER), encoding="utf-8")
    assert main(["import", str(source), "--model", str(tiny_llama_dir), "--device", "cpu"]) == 0
    settings = load_session("tale").settings
    assert {k: settings[k] for k in SHIPPED["llama.cpp"]} == SHIPPED["llama.cpp"]
    assert settings["preset"] == "llama.cpp"
    assert (settings["temperature"], settings["top_p"]) == (0.8, 0.95)


def test_a_text_only_loomterm_tree_is_retokenized(sample, tiny_llama_dir, tmp_path):
    _, data = sample
    obj = json.loads(render(data, "json"))
    for node in obj["nodes"]:
        for key in ("tokens", "pieces", "logprobs", "top"):
            node.pop(key)
    source = tmp_path / "text-only.json"
    source.write_text(json.dumps(obj), encoding="utf-8")
    tree = read_import(source)
    assert isinstance(tree, export.TextTree)
    imported = import_session(tree, "retok", model=str(tiny_llama_dir), device="cpu")
    assert imported.path_text() == data.path_text()
    assert imported.cursor == data.cursor
    assert {n.id for n in imported.tree.nodes.values()} == set(data.tree.nodes)


def test_tokens_of_another_model_are_retokenized_on_import(sample, tiny_gpt2_dir, tmp_path):
    _, data = sample
    out = tmp_path / "llama.json"
    out.write_text(render(data, "json"), encoding="utf-8")
    imported = import_session(read_import(out), "moved", model=str(tiny_gpt2_dir), device="cpu")
    assert imported.path_text() == data.path_text()
    assert imported.model["fingerprint"] != data.model["fingerprint"]
    assert load(session_path("moved")).tree.nodes.keys() == data.tree.nodes.keys()
