"""The headless parts of the editor: the document model, safe display, undo history,
key maps and preferences. No app, no model forward passes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loomterm.config.keymap import KeymapError, load_keymap
from loomterm.tree import Origin, Tree
from loomterm.tui.document import PENDING, DocumentModel
from loomterm.tui.history import History, Place
from loomterm.tui.keymap import ACTIONS, app_bindings
from loomterm.tui.prefs import Prefs, load_prefs, prefs_path, save_prefs
from loomterm.tui.sanitize import cells, display, safe, safe_line

# A toy byte vocabulary: ids 0..255 are single bytes, so UTF-8 splits across tokens.
WORDS = {256: b"Hello", 257: b" world", 258: b"\n", 259: b" caf\xc3", 260: b"\xa9!"}


def token_bytes(token: int) -> bytes:
    return WORDS.get(token, bytes([token % 256]))


def make_tree():
    tree = Tree()
    a = tree.add(tree.root, [256, 257, 258], Origin.USER)
    b = tree.add(a, [256, 259], Origin.MODEL, logprobs=[-0.1, -2.0])
    c = tree.add(b, [260, 258, 257], Origin.MODEL)
    d = tree.add(a, [257, 257], Origin.MODEL)
    return tree, a, b, c, d


def check(doc: DocumentModel) -> None:
    """The invariants every operation keeps."""
    assert "".join("".join(block.pieces) for block in doc.blocks) == doc.text
    for block, start in zip(doc.blocks, doc.block_starts, strict=True):
        assert block.ends == [
            sum(map(len, block.pieces[: i + 1])) for i in range(len(block.pieces))
        ]
        assert doc.text[start : start + block.length] == "".join(block.pieces)
    assert 0 <= doc.caret <= doc.length
    # Lines cover the text in order; each logical line ends at a newline or the end.
    assert doc.starts[0] == 0
    for i in range(len(doc.starts) - 1):
        gap = doc.text[doc.ends[i] : doc.starts[i + 1]]
        assert gap in ("", "\n")
    assert doc.ends[-1] == doc.length
    for start, end in zip(doc.starts, doc.ends, strict=True):
        assert cells(doc.text[start:end]) <= doc.width - 1 or end - start == 1


def test_show_decodes_split_characters_across_nodes():
    tree, a, b, c, d = make_tree()
    doc = DocumentModel(token_bytes)
    doc.show(b)  # ends inside "é": shown as a replacement character, like the engine
    assert doc.text == "Hello world\nHello caf\ufffd"
    doc.show(c)  # the next node completes it
    assert doc.text == "Hello world\nHello caf\u00e9!\n world"
    assert not doc.dirty
    check(doc)


def test_show_reuses_the_shared_prefix():
    tree, a, b, c, d = make_tree()
    doc = DocumentModel(token_bytes)
    doc.show(c)
    first_block = doc.blocks[1]
    doc.show(d)
    assert doc.blocks[1] is first_block
    assert doc.text == "Hello world\n world world"
    check(doc)


def test_token_mapping():
    tree, a, b, c, d = make_tree()
    doc = DocumentModel(token_bytes)
    doc.show(c)
    node, index, position = doc.token_at(doc.text.index("caf"))
    assert node is b and index == 1 and position == 4
    assert doc.end_of(a) == len("Hello world\n")
    assert doc.char_of_position(3) == len("Hello world\n")
    doc.move_to(len("Hello world\nHel"))
    assert doc.split_caret() == (3, "Hel")
    assert doc.node_before_caret() is b


def test_local_edits_make_pending_blocks():
    tree, a, b, c, d = make_tree()
    doc = DocumentModel(token_bytes)
    doc.show(c)
    doc.move_to(5)
    doc.insert(",")
    assert doc.text.startswith("Hello, world")
    assert doc.dirty
    assert any(block.kind == PENDING for block in doc.blocks)
    doc.delete(0, 2)
    assert doc.text.startswith("llo, world")
    check(doc)
    doc.show(c)  # dropping the edits brings the engine's text back
    assert doc.text == "Hello world\nHello caf\u00e9!\n world" and not doc.dirty


def test_wrapping_breaks_at_spaces_and_counts_wide_characters():
    doc = DocumentModel(token_bytes)
    doc.set_width(11)  # 10 cells of text
    doc.replace_text("aaa bbb ccc ddd\n\u65e5\u672c\u8a9e\u65e5\u672c\u8a9e\u65e5\u672c")
    lines = [doc.text[s:e] for s, e in zip(doc.starts, doc.ends, strict=True)]
    assert lines == ["aaa bbb ", "ccc ddd", "\u65e5\u672c\u8a9e\u65e5\u672c", "\u8a9e\u65e5\u672c"]
    check(doc)


def test_caret_moves():
    doc = DocumentModel(token_bytes)
    doc.set_width(40)
    doc.replace_text("one two three\nfour five")
    doc.move_to(0)
    doc.move_word_right()
    assert doc.caret == 3
    doc.move_word_right()
    assert doc.caret == 7
    doc.move_word_left()
    assert doc.caret == 4
    doc.move_end()
    assert doc.caret == len("one two three")
    doc.move_lines(1)
    assert doc.caret == len("one two three\nfour five")
    doc.move_home()
    assert doc.caret == len("one two three\n")


edits = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 60), st.text(min_size=1, max_size=5)),
        st.tuples(st.just("delete"), st.integers(0, 60), st.integers(1, 6)),
        st.tuples(st.just("show"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("width"), st.integers(3, 30), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(edits)
def test_any_sequence_of_edits_keeps_the_invariants(ops):
    tree, a, b, c, d = make_tree()
    nodes = [a, b, c, d]
    doc = DocumentModel(token_bytes)
    doc.show(c)
    shadow = doc.text
    for op, x, y in ops:
        if op == "insert":
            doc.move_to(x)
            at = doc.caret
            doc.insert(y)
            shadow = shadow[:at] + y + shadow[at:]
        elif op == "delete":
            start = min(x, len(shadow))
            doc.delete(start, start + y)
            shadow = shadow[:start] + shadow[start + y :]
        elif op == "show":
            doc.show(nodes[x])
            shadow = doc.text
        else:
            doc.set_width(x)
        assert doc.text == shadow
        check(doc)


def test_display_never_lets_control_characters_through():
    for code in (
        list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0)) + [0x202E, 0x2028, 0x200D]
    ):
        char = chr(code)
        if char == "\n":
            continue
        shown, _ = display(char)
        assert all(c.isprintable() or c == " " for c in shown), hex(code)
    assert safe("\x1b[2J") == "\u241b[2J"
    assert safe("a\tb") == "a    b"
    assert safe_line("x\ny") == "x\u23cey"
    assert cells("\u65e5\u672c") == 4 and cells("\x9b") == 4


def test_history_is_navigation():
    tree, a, b, c, d = make_tree()
    history = History()
    for node in (a, b, c):
        history.push(Place(node, 0))
    assert history.undo().node is b
    assert history.undo().node is a
    assert history.undo() is None
    assert history.redo().node is b
    history.push(Place(d, 0))  # a new place drops the redo branch
    assert history.redo() is None
    assert history.undo().node is b


def test_keymap_files(isolated_dirs):
    from loomterm.config.locations import config_dir

    assert load_keymap() == {}
    path = config_dir() / "keymap.toml"
    path.write_text('generate = "f9"\n[keys]\nundo = "ctrl+u"\n')
    assert load_keymap() == {"generate": "f9", "undo": "ctrl+u"}
    path.write_text("generate = [")
    with pytest.raises(KeymapError, match="keymap.toml"):
        load_keymap()
    path.unlink()
    (config_dir() / "keymap.json").write_text(json.dumps({"help": "f12"}))
    assert load_keymap() == {"help": "f12"}


def test_every_action_has_an_id_a_binding_and_help():
    ids = [action.id for action in ACTIONS]
    assert len(ids) == len(set(ids))
    assert all(action.help.endswith(".") for action in ACTIONS)
    bound = {binding.id for binding in app_bindings()}
    assert {
        "generate",
        "regenerate",
        "generate_n",
        "prev_sibling",
        "next_sibling",
        "parent_branch",
        "child_branch",
        "stop",
        "undo",
        "redo",
        "export",
        "toggle_tree",
        "help",
        "quit",
        "alternatives",
    } <= bound
    keys = {binding.id: binding.key for binding in app_bindings()}
    assert keys["generate"] == "ctrl+g" and keys["regenerate"] == "ctrl+r"
    assert keys["generate_n"] == "ctrl+n" and keys["prev_sibling"] == "alt+left"
    assert keys["parent_branch"] == "alt+up" and keys["stop"] == "escape"
    assert keys["undo"] == "ctrl+z" and keys["redo"] == "ctrl+y"
    assert keys["export"] == "ctrl+e" and keys["toggle_tree"] == "ctrl+t"
    assert keys["help"] == "f1" and keys["quit"] == "ctrl+q"


def test_prefs_round_trip_and_survive_damage(isolated_dirs):
    assert load_prefs() == Prefs()
    save_prefs(Prefs(theme="loom-light", boundaries=True))
    assert load_prefs().theme == "loom-light" and load_prefs().boundaries
    prefs_path().write_text("{not json")
    assert load_prefs() == Prefs()
    prefs_path().write_text(json.dumps({"theme": 3, "tree": False}))
    assert load_prefs() == Prefs(tree=False)
