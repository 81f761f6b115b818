"""Hypothesis drives the document model as a writer would: typing, enters, backspaces,
deletes, caret moves and pastes (LF, CRLF and CR line breaks), in any order.

- The document's text and caret always equal a plain text editor's.
- Typing.Synced to the engine at random pauses (as the editor syncs), the path reads the
  document's text every time; typing only at the end of the writer's own text leaves
  no sibling anywhere in the tree, and the KV is a full recompute's.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loomterm.tui.document import DocumentModel
from loomterm.tui.ops import TypingRun, sync_text
from loomterm.tui.paste import paste_text
from tests.helpers import assert_matches_recompute, make_loom

CHARS = st.sampled_from(list("abcxyz ,.!é日😀") + ["\t"])
PASTES = st.lists(
    st.sampled_from(["Line one.", "\n", "\r\n", "\r", "two ", "日本", "\x1b[31m", "end"]),
    min_size=1,
    max_size=5,
).map("".join)
EDITS = st.one_of(
    st.tuples(st.just("type"), CHARS),
    st.tuples(st.just("enter"), st.none()),
    st.tuples(st.just("paste"), PASTES),
    st.tuples(st.just("backspace"), st.none()),
    st.tuples(st.just("delete"), st.none()),
    st.tuples(st.sampled_from(["left", "right", "start", "end"]), st.none()),
)


class PlainEditor:
    """A text and a caret, edited the obvious way."""

    def __init__(self) -> None:
        self.text = ""
        self.caret = 0

    def insert(self, text: str) -> None:
        self.text = self.text[: self.caret] + text + self.text[self.caret :]
        self.caret += len(text)

    def apply(self, kind: str, value) -> None:
        if kind == "type":
            self.insert(value)
        elif kind == "enter":
            self.insert("\n")
        elif kind == "paste":
            self.insert(value.replace("\r\n", "\n").replace("\r", "\n"))
        elif kind == "backspace" and self.caret:
            self.text = self.text[: self.caret - 1] + self.text[self.caret :]
            self.caret -= 1
        elif kind == "delete":
            self.text = self.text[: self.caret] + self.text[self.caret + 1 :]
        elif kind == "left":
            self.caret = max(0, self.caret - 1)
        elif kind == "right":
            self.caret = min(len(self.text), self.caret + 1)
        elif kind == "start":
            self.caret = 0
        elif kind == "end":
            self.caret = len(self.text)


def apply(doc: DocumentModel, kind: str, value) -> None:
    """What the document view does for the same key or paste."""
    if kind == "type":
        doc.insert(value)
    elif kind == "enter":
        doc.insert("\n")
    elif kind == "paste":
        doc.insert(paste_text(value))
    elif kind == "backspace":
        doc.backspace()
    elif kind == "delete":
        doc.delete_forward()
    elif kind == "left":
        doc.move_left()
    elif kind == "right":
        doc.move_right()
    elif kind == "start":
        doc.move_to(0)
    elif kind == "end":
        doc.move_to(doc.length)


@settings(max_examples=150, deadline=None)
@given(st.lists(EDITS, max_size=60), st.integers(min_value=4, max_value=40))
def test_the_document_holds_what_a_plain_editor_holds(edits, width):
    doc = DocumentModel(lambda token: b"")
    doc.set_width(width)
    plain = PlainEditor()
    for kind, value in edits:
        apply(doc, kind, value)
        plain.apply(kind, value)
        assert doc.text == plain.text
        assert doc.caret == plain.caret
    assert doc.line_count >= plain.text.count("\n") + 1


AT_END = st.one_of(
    st.tuples(st.just("type"), st.text(alphabet="abc xyz,.é", min_size=1, max_size=6)),
    st.tuples(st.just("enter"), st.none()),
    st.tuples(st.just("paste"), PASTES),
    st.tuples(st.just("backspace"), st.none()),
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(AT_END, st.booleans()), min_size=1, max_size=25))
# Found by CI: a node retyped in place to as many tokens ("a" -> a line break, "two "
# -> "two a") was shown with its old text when the document was not told to forget it.
@example(steps=[(("type", "a"), True), (("backspace", None), False), (("enter", None), True)])
@example(steps=[(("paste", "two "), True), (("type", "a"), True)])
def test_typing_at_the_end_with_pauses_anywhere_makes_one_node(tiny_llama_dir, steps):
    loom = make_loom(tiny_llama_dir, n_ctx=512)
    doc = DocumentModel(loom.codec.token_bytes)

    def rewritten(event, changed):  # as the editor does (``LoomApp.on_loom_changed``)
        if event == "rewrite" and changed is not None:
            doc.forget(changed)

    loom.subscribe(rewritten)
    doc.show(loom.root)
    run = TypingRun()
    node = loom.root
    emptied = False  # all the text was deleted once: typing again starts a new node
    for (kind, value), pause in steps:
        apply(doc, kind, value)
        emptied = emptied or (node.end > 0 and not doc.text)
        if pause and doc.dirty:
            node = sync_text(loom, node, doc.text, run=run)
            assert loom.text(node) == doc.text
            doc.show(node)
    if doc.dirty:
        node = sync_text(loom, node, doc.text, run=run)
    assert loom.text(node) == doc.text
    if not emptied:
        assert [n for n in loom.tree.nodes.values() if len(n.children) > 1] == []
        assert len(loom.tree.nodes) == (2 if node.end else 1)
    if node.end:
        assert_matches_recompute(loom, node)
