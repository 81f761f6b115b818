"""Typing coalesces into the node being written (``Loom.retype``, ``ops.sync_text``).

The writer's own childless node is retyped in place at any pause: no sibling, the same
node, its KV and logits those of a full recompute, and no more tokens computed than an
append of the typed tokens (the splice it replaces computes the same). Model text, or
a node with children, branches once; the rest of that run of typing goes into the new
branch. The session file holds each retype whole, and reopens to the same tree.
"""

from __future__ import annotations

import pytest

from loomterm.sessions.session import close_session, save_loom
from loomterm.store import load
from loomterm.tree import Origin
from loomterm.tui.ops import TypingRun, sync_text
from tests.helpers import ForwardCounter, assert_matches_recompute, make_loom


def fragments(loom) -> list[list[str]]:
    """The texts of every group of siblings (a node with more than one child)."""
    return [
        [loom.decode(child.tokens) for child in node.children]
        for node in loom.tree.nodes.values()
        if len(node.children) > 1
    ]


def type_with_pauses(loom, steps: list[str], run: TypingRun | None = None):
    """Each step is the text after one pause: synced as the editor syncs it."""
    node = loom.cursor
    for text in steps:
        node = sync_text(loom, node, text, run=run)
        loom.cursor = node
    return node


def test_pauses_mid_word_and_enters_leave_one_node(loom):
    steps = [
        " The lo",
        " The long",
        " The longer road",
        " The longer road\n",
        " The longer road\n\n",
    ]
    node = type_with_pauses(loom, steps)
    assert loom.text(node) == steps[-1]
    assert len(loom.tree.nodes) == 2  # the root and one node
    assert fragments(loom) == []
    assert node.origin is Origin.USER
    assert_matches_recompute(loom, node)


def test_backspace_and_typing_in_the_middle_of_own_text_stay_in_place(loom):
    node = type_with_pauses(loom, [" Once upon a time there", " Once upon a tme there"])
    node = type_with_pauses(loom, [" Once upon a lovely tme there", " Once upon a lovely time"])
    assert loom.text(node) == " Once upon a lovely time"
    assert len(loom.tree.nodes) == 2
    assert_matches_recompute(loom, node)


def test_retyping_computes_no_more_than_the_splice_it_replaces(tiny_llama_dir):
    before = " The quick brown fox jumps over the lazy dog"
    counts = {}
    for way in ("retype", "edit"):
        loom = make_loom(tiny_llama_dir)
        node = type_with_pauses(loom, [before])
        loom.next_logits(node)
        with ForwardCounter(loom) as counter:
            if way == "retype":
                assert loom.retype(node, before + " and then") is node
            else:
                node = loom.edit(node, before + " and then")
            counts[way] = counter.tokens
        assert_matches_recompute(loom, node)
    assert 0 < counts["retype"] <= counts["edit"], counts


def test_model_text_and_nodes_with_children_branch_once_per_run(llama_loom):
    loom = llama_loom
    prompt = sync_text(loom, loom.root, " The cat sat")
    story = loom.append_tokens(prompt, loom.encode(" on the mat and slept."), Origin.MODEL)
    assert loom.retype(story, loom.text(story) + " Then") is None  # model text
    assert loom.retype(prompt, " The cat sat down") is None  # it has a child
    run = TypingRun()
    text = loom.text(story)
    at = text.index(" on the mat")
    steps = [text[:at] + " quietly" + text[at:], text[:at] + " quietly, softly" + text[at:]]
    steps.append(text[:at] + " quietly, softly, at last" + text[at:])
    node = story
    for step in steps:
        node = sync_text(loom, node, step, run=run)
    assert loom.text(node) == steps[-1]
    # One new branch beside the old text: the old text is still there, unchanged.
    groups = fragments(loom)
    assert len(groups) == 1 and len(groups[0]) == 2, groups
    assert loom.text(story) == text
    assert node.approx  # its suffix was moved (fast splice mode)
    loom.refresh(node)
    assert_matches_recompute(loom, node)


def test_exact_mode_recomputes_what_follows_a_retyped_run_node(llama_loom):
    loom = llama_loom
    loom.update_settings(splice_mode="exact")
    prompt = sync_text(loom, loom.root, " The dog ran")
    story = loom.append_tokens(prompt, loom.encode(" to the park."), Origin.MODEL)
    run = TypingRun()
    text = loom.text(story)
    at = text.index(" to the")
    node = sync_text(loom, story, text[:at] + " fast" + text[at:], run=run)
    node = sync_text(loom, node, text[:at] + " very fast" + text[at:], run=run)
    assert loom.text(node) == text[:at] + " very fast" + text[at:]
    assert not node.approx
    assert_matches_recompute(loom, node)


def test_branch_here_makes_the_next_edit_a_new_branch(llama_loom):
    loom = llama_loom
    node = type_with_pauses(loom, [" Hello there"])
    node = sync_text(loom, node, " Hello there, friend", run=TypingRun(branch=True))
    assert loom.text(node) == " Hello there, friend"
    assert len(loom.tree.nodes) >= 3  # the old text kept its node


@pytest.mark.parametrize("exact", [False, True])
def test_the_session_file_holds_every_retype(llama_loom, tmp_path, exact):
    loom = llama_loom
    path = tmp_path / "typed.loom"
    save_loom(loom, path)
    loom.update_settings(splice_mode="exact" if exact else "fast")
    steps = [" It was", " It was a dark", " It was a dark and stormy", " It was a dork and stormy"]
    node = type_with_pauses(loom, steps)
    # Read while the session is open (what a kill -9 now would leave): already whole.
    data = load(path)
    assert data.path_text() == steps[-1]
    assert [n.tokens for n in data.tree.nodes.values()] == [
        n.tokens for n in loom.tree.nodes.values()
    ]
    close_session(loom)
    reopened = load(path).tree.nodes[node.id]
    assert reopened.tokens == node.tokens
    assert reopened.logprobs == pytest.approx(node.logprobs)


def test_a_run_node_with_a_branch_the_path_does_not_show_is_not_retyped(llama_loom):
    """An undo that cuts the path shown leaves the undone words as a child of the run's
    node; typing on must branch, not change that child's text with its parent's."""
    loom = llama_loom
    run = TypingRun()
    node = sync_text(loom, loom.root, " One two three", run=run)
    run.ids.add(node.id)
    undone = loom.append_tokens(node, loom.encode(" four five"), Origin.USER)
    run.ids.add(undone.id)
    kept = loom.text(undone)
    assert loom.retype(node, " One two three six", run=run.ids) is None
    typed = sync_text(loom, node, " One two three six", run=run)
    assert loom.text(typed) == " One two three six"
    assert loom.text(undone) == kept  # the undone words read as they did
    assert_matches_recompute(loom, typed)
    assert_matches_recompute(loom, undone)
