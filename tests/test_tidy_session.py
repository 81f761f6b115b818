"""Move, merge and split are recorded as they happen: reopening the session shows the
same tree (ids, parents, sibling order, tokens, records, meta) and continues exactly."""

from __future__ import annotations

from loomterm.sessions.session import close_session, load_session, open_loom, save_loom
from tests.helpers import assert_matches_recompute, make_loom, tree_record

PROMPT = "The quick brown fox jumps over the lazy dog."


def test_moves_merges_and_splits_survive_a_reopen(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "tidy.loom"
    save_loom(loom, path)
    first = loom.append(loom.root, PROMPT)
    other = loom.append(loom.root, "Another beginning")
    a, b = loom.generate(first, 8, n=2, temperature=1.0, seed=4)
    loom.set_meta(a, rating=1)
    loom.set_meta(b, rating=-1)
    head = loom.split(a, 3)
    loom.move(b, other)  # its records are dropped: the file must say so too
    record = loom.merge(a)
    loom.unmerge(record)  # the same head id comes back
    tail = loom.append(b, " and then")
    merged = loom.merge(tail)  # b leaves the tree
    assert merged.head is b and b.id not in loom.tree.nodes
    loom.cursor = tail
    assert_matches_recompute(loom, tail)  # records of the moved part are recomputed
    expected = tree_record(loom.tree)
    close_session(loom)

    assert tree_record(load_session(path).tree) == expected
    again = open_loom(path, device="cpu", dtype="float32")
    try:
        assert tree_record(again.tree) == expected
        assert again.cursor.id == tail.id
        assert again.tree.nodes[head.id].children[0].id == a.id
        assert again.tree.nodes[tail.id].meta["rating"] == -1  # b's rating went with it
        assert_matches_recompute(again, again.cursor)
    finally:
        close_session(again)
