"""Foresight (``engine.loom.foresight``): a generation written ahead, out of sight, taken
when the same request comes, with its KV: nothing computed again, records equal to a
recompute, nothing seen (tree, events, session file) before it is taken."""

from __future__ import annotations

import threading

import pytest

from loomterm.sessions.session import close_session, load_session, save_loom
from tests.engine.test_records import assert_records_match
from tests.helpers import ForwardCounter, assert_matches_recompute, make_loom, tree_record

TEXT = "The old loom stood in the corner, its threads still taut after all these years."


def listen(loom) -> list[tuple[str, int | None]]:
    heard: list[tuple[str, int | None]] = []
    loom.subscribe(lambda event, node: heard.append((event, None if node is None else node.id)))
    return heard


def test_foreseen_nodes_are_out_of_sight_until_taken_then_reused_whole(loom):
    prompt = loom.append(loom.root, TEXT)
    settings = loom.settings.replace(max_new_tokens=6, temperature=1.0)
    before = tree_record(loom.tree)
    heard = listen(loom)
    ask = loom.ask(prompt, 3, settings)
    foresight = loom.foresee(ask)
    assert foresight is not None and len(foresight.nodes) == 3
    ahead = foresight.nodes
    # Out of sight: no parent lists them, the tree's nodes leave them out, nobody heard.
    assert tree_record(loom.tree) == before and prompt.children == []
    assert all(loom.is_foreseen(d) and d.id not in loom.tree.nodes for d in ahead)
    assert heard == []
    written = [(list(d.tokens), list(d.logprobs), [list(t) for t in d.top]) for d in ahead]
    assert all(len(d.tokens) == 6 for d in ahead)
    kvs = [d.kv for d in ahead]

    with ForwardCounter(loom) as counter:
        kids = loom.take_foresight(loom.ask(prompt, 3, settings))
        assert counter.tokens == 0  # taking computes nothing
    assert kids == ahead and prompt.children == ahead
    assert all(loom.tree.nodes[k.id] is k and not loom.is_foreseen(k) for k in kids)
    assert [(e, i) for e, i in heard if e == "add"] == [("add", k.id) for k in kids]
    assert [(e, i) for e, i in heard if e == "done"] == [("done", k.id) for k in kids]
    # The very tokens and records the runner wrote, and the KV it made.
    assert [(list(k.tokens), list(k.logprobs), [list(t) for t in k.top]) for k in kids] == written
    assert [k.kv for k in kids] == kvs
    if loom.capabilities.node_kv:
        assert all(k.kv is not None and k.kv.shape[3] == 6 for k in kids)
    for kid in kids:
        # Reused: at most the last token runs again for its logits (as for any node).
        with ForwardCounter(loom) as counter:
            loom.next_logits(kid)
            assert counter.tokens <= 1
        assert_matches_recompute(loom, kid)
        assert_records_match(loom, kid, first=prompt.end)
    assert loom.foresights() == ()


def test_a_different_request_drops_what_was_foreseen(llama_loom):
    loom = llama_loom
    prompt = loom.append(loom.root, TEXT)
    settings = loom.settings.replace(max_new_tokens=4)
    assert loom.foresee(loom.ask(prompt, 2, settings)) is not None
    for other in (
        loom.ask(prompt, 1, settings),  # another count
        loom.ask(prompt, 2, settings.replace(temperature=0.5)),  # other settings
    ):
        assert loom.foresee(loom.ask(prompt, 2, settings)) is not None
        assert loom.take_foresight(other) is None
        assert loom.foresights() == () and loom.tree.foreseen == {} and prompt.children == []
    # Another node (the prompt's path grew since) and the prompt retyped.
    ask = loom.ask(prompt, 2, settings)
    assert loom.foresee(ask) is not None
    loom.append(prompt, " More.")
    assert loom.take_foresight(loom.ask(prompt.children[0], 2, settings)) is None
    assert loom.tree.foreseen == {}


def test_a_cancelled_foresight_leaves_nothing(llama_loom):
    loom = llama_loom
    prompt = loom.append(loom.root, TEXT)
    before = tree_record(loom.tree)
    cancel = threading.Event()
    steps = []

    settings = loom.settings.replace(max_new_tokens=50)
    ask = loom.ask(prompt, 2, settings)

    # Cancelled after its third decoding step (from the forward pass itself, no mock).
    def count(module, inputs, output) -> None:
        steps.append(inputs[0].shape)
        if len(steps) == 3:
            cancel.set()

    handle = loom.runner.model.get_input_embeddings().register_forward_hook(count)
    try:
        assert loom.foresee(ask, cancel) is None
    finally:
        handle.remove()
    assert len(steps) <= 4  # stopped within one step
    assert loom.tree.foreseen == {} and loom.foresights() == ()
    assert tree_record(loom.tree) == before
    # The engine is whole: a generation after it equals a recompute.
    (kid,) = loom.generate(prompt, 4)
    assert_matches_recompute(loom, kid)


def test_the_session_file_has_foreseen_nodes_only_once_taken(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "ahead.loom"
    save_loom(loom, path)
    prompt = loom.append(loom.root, TEXT)
    settings = loom.settings.replace(max_new_tokens=5)
    foresight = loom.foresee(loom.ask(prompt, 2, settings))
    assert foresight is not None
    ids = [d.id for d in foresight.nodes]
    stored = load_session(path)
    assert not set(ids) & set(stored.tree.nodes)
    assert prompt.id in stored.tree.nodes

    kids = loom.take_foresight(loom.ask(prompt, 2, settings))
    assert kids is not None
    close_session(loom)
    stored = load_session(path).tree
    for kid in kids:
        again = stored.nodes[kid.id]
        assert again.parent.id == prompt.id
        assert again.tokens == kid.tokens and again.logprobs == kid.logprobs
    assert [c.id for c in stored.nodes[prompt.id].children] == ids


def test_foreseen_nodes_dropped_at_close_never_reach_the_file(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "dropped.loom"
    save_loom(loom, path)
    prompt = loom.append(loom.root, TEXT)
    foresight = loom.foresee(loom.ask(prompt, 2, loom.settings.replace(max_new_tokens=3)))
    assert foresight is not None
    close_session(loom)
    stored = load_session(path).tree
    assert set(stored.nodes) == set(loom.tree.nodes)
    assert stored.nodes[prompt.id].children == []


@pytest.mark.parametrize("n", [1, 2])
def test_taken_foreseen_nodes_leave_the_engine_as_a_generation_does(llama_loom, n):
    """After taking, generating on from a taken node works, and its KV stays exact."""
    loom = llama_loom
    prompt = loom.append(loom.root, TEXT)
    settings = loom.settings.replace(max_new_tokens=4)
    assert loom.foresee(loom.ask(prompt, n, settings)) is not None
    # Other work in between, over the very columns the foreseen nodes were written in: their
    # KV must survive the working cache's reuse.
    (between,) = loom.generate(prompt, 6)
    other = loom.append(loom.root, "Something else entirely, and long enough to matter.")
    loom.generate(other, 6)
    kids = loom.take_foresight(loom.ask(prompt, n, settings))
    assert kids is not None and len(kids) == n
    assert prompt.children == [between, *kids]
    for kid in kids:
        assert_matches_recompute(loom, kid)
        (more,) = loom.generate(kid, 3)
        assert_matches_recompute(loom, more)


def test_nothing_is_foreseen_where_healing_would_change_the_tree(loom):
    """Typed text that ends inside a word is healed when generated from: its last
    tokens are backed up, a change to the tree made only when the writer asks. Foresight
    writes nothing there (and the tree is untouched); with healing off it does."""
    prompt = loom.append(loom.root, "Once upon a time, in a land far away, there lived a wea")
    settings = loom.settings.replace(max_new_tokens=6, temperature=1.0, token_healing="on")
    before = tree_record(loom.tree)
    assert loom.foresee(loom.ask(prompt, 2, settings)) is None
    assert tree_record(loom.tree) == before and loom.tree.foreseen == {}
    plain = settings.replace(token_healing="off")
    assert loom.foresee(loom.ask(prompt, 2, plain)) is not None
    assert tree_record(loom.tree) == before
