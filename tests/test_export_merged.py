"""Exports of a merged node (``Loom.merge``, the tree tools) mark who wrote each part
as they did before the merge: the merged node keeps its parts' authors in
``meta["merged_origins"]``, and the Markdown and HTML exports read it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from loomterm.engine import Loom
from loomterm.export import read_import, render
from loomterm.sessions.session import close_session, import_session, load_session, save_loom
from loomterm.tree import MERGED_ORIGINS, Origin
from tests.helpers import ends_whole, make_loom


@pytest.fixture
def loom(tiny_llama_dir) -> Iterator[Loom]:
    loom = make_loom(tiny_llama_dir)
    yield loom
    close_session(loom)


def normalised(text: str) -> str:
    """An export without what a merge changes by design: node ids, the node and
    segment counts, the time of the last change."""
    text = re.sub(r'data-node="\d+"', 'data-node="N"', text)
    text = re.sub(r"node \d+", "node N", text)
    text = re.sub(r"\d+ nodes", "N nodes", text)
    text = re.sub(r"in \d+ segments", "in N segments", text)
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d", "TIME", text)


def test_a_merged_chain_exports_as_its_parts_did(loom):
    typed = loom.append(loom.root, "Dear diary,\n\n")
    reply = loom.generate(typed, 12, temperature=0.7, seed=8)[0]
    assert ends_whole(loom, reply) and Origin(reply.origin) is Origin.MODEL
    more = loom.append(reply, " And then I wrote this myself.")
    loom.append(loom.root, "Another day")  # a second branch for the outlines
    loom.cursor = more
    save_loom(loom, "diary")
    before = load_session("diary")
    exports = {
        (fmt, branch): render(before, fmt, branch, attribution=True)
        for fmt in ("md", "html")
        for branch in ("current", "all")
    }
    assert "**You**" in exports["md", "current"] and "**Model**" in exports["md", "current"]

    sizes = [len(typed.tokens), len(reply.tokens), len(more.tokens)]
    merged = loom.merge(reply).node  # the typed text folds into the reply
    merged = loom.merge(more).node  # and that into the last line
    assert merged is more and len(loom.cursor.path()) == 2
    runs = [[sizes[0], "user"], [sizes[1], "model"], [sizes[2], "user"]]
    assert more.meta[MERGED_ORIGINS] == runs
    assert len(more.tokens) == sum(sizes)
    after = load_session("diary")  # as saved: the parts' authors are in the file
    for (fmt, branch), want in exports.items():
        got = render(after, fmt, branch, attribution=True)
        assert normalised(got) == normalised(want), (fmt, branch)
    # the HTML colours the model's part as generated, the rest as typed
    html = render(after, "html", "current")
    assert re.findall(r'class="seg (o-\w+)', html) == ["o-user", "o-model", "o-user"]


def test_a_merged_chat_turn_is_labelled_by_its_parts(loom):
    """Chat turns: an assistant turn the user typed part of reads "(edited)", as it did
    when the parts were separate nodes."""
    question = loom.append(loom.root, "What is a loom?\n", role="user")
    answer = loom.generate(question, 8, temperature=0.7, seed=8)[0]
    answer.meta["role"] = "assistant"
    tail = loom.append(answer, " (I added this.)", role="assistant")
    loom.cursor = tail
    save_loom(loom, "chat")
    want = render(load_session("chat"), "md")
    assert "**Assistant (edited)**" in want
    loom.merge(tail)
    got = render(load_session("chat"), "md")
    assert normalised(got) == normalised(want)


def test_a_merged_node_moved_to_another_model_keeps_its_parts(loom, tiny_gpt2_dir, tmp_path):
    """``merged_origins`` counts tokens: on import for another tokenizer each part is
    encoded again and counted in the new tokens, so the export still marks it."""
    typed = loom.append(loom.root, "Dear diary,\n\n")
    reply = loom.generate(typed, 12, temperature=0.7, seed=8)[0]
    more = loom.append(reply, " And then I wrote this myself.")
    loom.cursor = more
    save_loom(loom, "diary")
    want = render(load_session("diary"), "md", attribution=True)
    loom.merge(reply)
    loom.merge(more)
    out = tmp_path / "diary.json"
    out.write_text(render(load_session("diary"), "json"), encoding="utf-8")
    moved = import_session(read_import(out), "moved", model=str(tiny_gpt2_dir), device="cpu")
    node = moved.tree.nodes[more.id]
    runs = node.meta[MERGED_ORIGINS]
    assert [origin for _, origin in runs] == ["user", "model", "user"]
    assert sum(count for count, _ in runs) == len(node.tokens) != len(more.tokens)
    pieces, done, texts = moved.pieces[node.id], 0, []
    for count, _ in runs:
        texts.append("".join(pieces[done : done + count]))
        done += count
    assert texts == [
        loom.text(typed),
        loom.decode(reply.tokens[len(typed.tokens) :]),
        " And then I wrote this myself.",
    ]
    body = render(moved, "md", attribution=True).split("\n\n", 2)[2]  # past the title and the facts
    assert body == want.split("\n\n", 2)[2] and "**Model**" in body
