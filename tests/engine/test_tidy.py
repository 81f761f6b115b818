"""Tidying the tree (move, merge, split) against a full recompute of the paths it
touches, and the undo of each: the tree, the KV that stays valid, and the records."""

from __future__ import annotations

import pytest

from loomterm.errors import EditRangeError, InputError
from loomterm.tree import Origin
from tests.helpers import ForwardCounter, assert_matches_recompute

PROMPT = "The quick brown fox jumps over the lazy dog."


def shape(tree):
    """The tree's structure and tokens, for equality after an undo."""
    return sorted(
        (n.id, n.parent.id if n.parent else None, [c.id for c in n.children], list(n.tokens))
        for n in tree.nodes.values()
    )


def test_split_keeps_kv_and_merge_joins_it_back(loom):
    prompt = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(prompt, 10, temperature=0)
    before = shape(loom.tree)
    tokens = loom.tokens(kid)
    head = loom.split(kid, 4)
    assert head.parent is prompt and head.children == [kid]
    assert loom.tokens(kid) == tokens and head.kv.shape[3] == 4
    assert_matches_recompute(loom, head)
    assert_matches_recompute(loom, kid)
    with ForwardCounter(loom) as counter:
        record = loom.merge(kid)
        assert head.id not in loom.tree.nodes and kid.parent is prompt
        assert loom.tokens(kid) == tokens
        assert kid.kv is not None and kid.kv.shape[3] == len(kid.tokens)
        assert_matches_recompute(loom, kid)
        # The merged node's KV was joined, not computed: only the recompute checks ran
        # the model (through reference_logits, which is not the loom's runner cache).
        assert counter.tokens == 1 + len(tokens)  # the reference forward alone
    assert shape(loom.tree) == before
    # Undo of the merge: the same head object, the same id, the same split.
    back = loom.unmerge(record)
    assert back is head and loom.tree.nodes[head.id] is head
    assert head.children == [kid] and kid.parent is head
    assert_matches_recompute(loom, head)
    assert_matches_recompute(loom, kid)


def test_merge_needs_an_only_child(loom):
    prompt = loom.append(loom.root, PROMPT)
    a, b = loom.generate(prompt, 4, n=2, temperature=1.0, seed=1)
    with pytest.raises(InputError, match="only an only child"):
        loom.merge(a)
    with pytest.raises(InputError, match="no parent"):
        loom.merge(prompt)
    with pytest.raises(EditRangeError):
        loom.split(a, 0)
    with pytest.raises(EditRangeError):
        loom.split(a, len(a.tokens))


def test_merge_of_two_authors_keeps_who_wrote_what(loom):
    prompt = loom.append(loom.root, "Hello")
    more = loom.append(prompt, " there, friend")
    more.origin = Origin.MODEL
    count = len(prompt.tokens)
    record = loom.merge(more)
    assert more.meta["merged_origins"][0] == [count, "user"]
    assert_matches_recompute(loom, more)
    # A later cut divides the authors between the halves.
    head = loom.split(more, count)
    assert head.meta["merged_origins"] == [[count, "user"]]
    assert "merged_origins" not in more.meta and more.origin is Origin.MODEL
    again = loom.merge(more)
    assert more.meta["merged_origins"][0] == [count, "user"]
    loom.unmerge(again)
    assert head.meta == {"merged_origins": [[count, "user"]]}
    assert "merged_origins" not in more.meta
    assert record.node is more


def test_merge_moves_the_cursor_off_the_parent(loom):
    prompt = loom.append(loom.root, PROMPT)
    tail = loom.append(prompt, " More words here.")
    loom.cursor = prompt
    loom.merge(tail)
    assert loom.cursor is tail


def test_move_to_a_different_context_recomputes(loom):
    first = loom.append(loom.root, PROMPT)
    other = loom.append(loom.root, "A completely different start, longer than that")
    (kid,) = loom.generate(first, 8, temperature=0)
    (grandkid,) = loom.generate(kid, 5, temperature=0)
    assert_matches_recompute(loom, grandkid)
    old = loom.move(kid, other)
    assert old == (first, 0)
    assert kid.parent is other and grandkid.parent is kid and kid not in first.children
    # The subtree's KV and records came from the old context: dropped, recomputed.
    assert kid.kv is None and grandkid.kv is None
    assert all(lp is None for lp in kid.logprobs)
    assert_matches_recompute(loom, grandkid)
    assert_matches_recompute(loom, kid)
    assert all(lp is not None for lp in kid.logprobs)  # records from the new context
    # Moving back is the undo.
    loom.move(kid, *old)
    assert first.children == [kid]
    assert_matches_recompute(loom, grandkid)


def test_move_between_the_same_tokens_keeps_the_kv(loom):
    a = loom.append(loom.root, PROMPT)
    b = loom.append(loom.root, PROMPT)  # the same tokens on another branch
    (kid,) = loom.generate(a, 8, temperature=0)
    kv = kid.kv
    logprobs = list(kid.logprobs)
    loom.move(kid, b)
    assert kid.kv is not None and kid.logprobs == logprobs
    assert kid.kv.shape == kv.shape
    with ForwardCounter(loom) as counter:
        logits = loom.next_logits(kid)
        assert counter.tokens <= 1  # the path's KV is all there
    from tests.helpers import reference_logits, relative_error

    assert relative_error(logits, reference_logits(loom, loom.tokens(kid))) < 1e-4


def test_move_refuses_a_cycle_and_the_root(loom):
    a = loom.append(loom.root, PROMPT)
    b = loom.append(a, " and more")
    with pytest.raises(InputError, match="below itself"):
        loom.move(a, b)
    with pytest.raises(InputError, match="root"):
        loom.move(loom.root, a)
    assert b.parent is a and a.parent is loom.root


def test_tidy_events(loom):
    seen = []
    loom.subscribe(lambda event, node: seen.append((event, node.id if node else None)))
    a = loom.append(loom.root, PROMPT)
    b = loom.append(loom.root, "Other")
    kid = loom.append(a, " tail text")
    seen.clear()
    loom.move(kid, b)
    assert ("move", kid.id) in seen and ("records", kid.id) in seen
    seen.clear()
    record = loom.merge(kid)
    assert seen[0] == ("merge", kid.id)
    seen.clear()
    loom.unmerge(record)
    assert seen == [("split", b.id)]
