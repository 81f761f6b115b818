"""Every cache operation against a full recompute of the same tokens."""

from __future__ import annotations

import threading

import pytest

from loomterm.engine.kv.cache import WorkingCache
from loomterm.errors import EditRangeError, EmptyEditError, InputError, LoomError
from loomterm.tree import Origin
from tests.helpers import ForwardCounter, assert_matches_recompute

PROMPT = "The quick brown fox jumps over the lazy dog."


def test_append_equals_recompute(loom):
    node = loom.append(loom.root, PROMPT)
    assert node.origin is Origin.USER
    assert loom.text(node) == PROMPT
    assert node.kv is not None and node.kv.shape[3] == len(node.tokens)
    assert_matches_recompute(loom, node)
    more = loom.append(node, " And then it slept.")
    assert loom.text(more) == PROMPT + " And then it slept."
    assert_matches_recompute(loom, more)


def test_generate_equals_recompute_and_records(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 12, temperature=0)
    assert kid.parent is node and kid.origin is Origin.MODEL
    assert 1 <= len(kid.tokens) <= 12
    assert len(kid.logprobs) == len(kid.tokens) == len(kid.top)
    assert all(len(alts) == 10 for alts in kid.top)
    # Greedy: the chosen token is the best alternative, and its log-prob is recorded.
    for token, logprob, alts in zip(kid.tokens, kid.logprobs, kid.top):
        assert alts[0][0] == token
        assert logprob == pytest.approx(alts[0][1])
    assert_matches_recompute(loom, kid)
    # A child of a generated node continues from its cached KV.
    (grandkid,) = loom.generate(kid, 5, temperature=0)
    assert_matches_recompute(loom, grandkid)


def test_recorded_logprobs_match_a_recompute(loom):
    import torch

    from tests.helpers import reference_logits

    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 6, temperature=1.0, seed=3)
    path = loom.tokens(node)
    for i, token in enumerate(kid.tokens):
        logprobs = reference_logits(loom, path + kid.tokens[:i]).log_softmax(-1)
        assert kid.logprobs[i] == pytest.approx(float(logprobs[token]), abs=1e-4)
        best = torch.topk(logprobs, 10).indices.tolist()
        assert [t for t, _ in kid.top[i]] == best


def test_truncate_is_free_and_exact(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 10, temperature=0)
    total = kid.end
    with ForwardCounter(loom) as counter:
        cut = loom.truncate(kid, total - 4)
        assert counter.tokens == 0  # truncate itself runs nothing
        loom.next_logits(cut)
        assert counter.tokens <= 1  # at most the last kept token, for its logits
    assert_matches_recompute(loom, cut)
    assert loom.tokens(cut) == loom.tokens(kid)[: total - 4]
    # Nothing destroyed: the old tail is still there, as a branch below the cut.
    assert kid in cut.children and kid.end == total
    assert_matches_recompute(loom, kid)


def test_truncate_inside_a_node_splits_and_shares_kv(loom):
    node = loom.append(loom.root, PROMPT)
    before = loom.tokens(node)
    storage = node.kv.untyped_storage().data_ptr()
    head = loom.truncate(node, 4)
    assert head is not node and node.parent is head and head.children == [node]
    assert loom.tokens(head) == before[:4] and loom.tokens(node) == before
    assert head.kv.untyped_storage().data_ptr() == storage
    assert node.kv.untyped_storage().data_ptr() == storage
    assert_matches_recompute(loom, head)
    assert loom.truncate(head, 0) is loom.root
    assert loom.truncate(node, node.end) is node


def test_truncate_at_a_boundary_returns_the_existing_node(loom):
    a = loom.append(loom.root, "Hello")
    b = loom.append(a, " world")
    assert loom.truncate(b, a.end) is a
    assert len(loom.tree.nodes) == 3


def test_exact_splice_recomputes_only_the_suffix(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 10, temperature=0)
    old = loom.tokens(kid)
    insert = loom.encode(" red")
    with ForwardCounter(loom) as counter:
        new = loom.splice(kid, 3, 5, " red", exact=True)
    assert loom.tokens(new) == old[:3] + insert + old[5:]
    assert counter.tokens <= len(insert) + len(old) - 5 + 1
    assert loom.is_exact(new)
    assert_matches_recompute(loom, new)
    assert loom.tokens(kid) == old  # the old branch is intact
    assert_matches_recompute(loom, kid)


def test_splice_deletion_and_insertion(loom):
    node = loom.append(loom.root, PROMPT)
    old = loom.tokens(node)
    deleted = loom.splice(node, 2, 4, "", exact=True)
    assert loom.tokens(deleted) == old[:2] + old[4:]
    assert_matches_recompute(loom, deleted)
    inserted = loom.splice(node, 3, 3, " very", exact=True)
    assert loom.tokens(inserted) == old[:3] + loom.encode(" very") + old[3:]
    assert_matches_recompute(loom, inserted)
    at_end = loom.splice(node, len(old), len(old), " Yes.", exact=True)
    assert loom.text(at_end) == PROMPT + " Yes."
    at_start = loom.splice(node, 0, 1, "A", exact=True)
    assert_matches_recompute(loom, at_start)


def test_edit_becomes_a_minimal_exact_splice(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 8, temperature=0)
    old_text = loom.text(kid)
    new_text = old_text.replace("brown", "green", 1)
    before = len(loom.tree.nodes)
    edited = loom.edit(kid, new_text, exact=True)
    assert loom.text(edited) == new_text
    assert_matches_recompute(loom, edited)
    # Only tokens around the change were replaced: the common prefix stays shared.
    shared = edited.path()[1]
    assert shared in node.path() or shared is node
    assert len(loom.tree.nodes) > before


@pytest.mark.parametrize("change", ["append", "delete"])
def test_writing_on_after_a_stop_token_leaves_it_on_the_old_branch(loom, change):
    """A generation that ended with its end-of-text token, then the writer types on (or
    deletes) at the end: the new branch ends with the writer's text, not with the stop
    (the model would be asked to go on after its own end); the old branch keeps it."""
    (stop,) = sorted(loom.eos_ids)[:1]
    node = loom.append(loom.root, PROMPT)
    ended = loom.splice_tokens(node, node.end, node.end, [stop])  # as if generated
    text = loom.text(ended)
    new_text = text + " And then more" if change == "append" else text[:-3]
    edited = loom.edit(ended, new_text)
    assert loom.text(edited) == new_text
    assert stop not in edited.path_tokens()
    assert ended.path_tokens()[-1] == stop  # nothing lost: the old branch is whole
    assert_matches_recompute(loom, edited)
    # A change before the end keeps the stop after it.
    middle = loom.edit(ended, text.replace("fox", "cat", 1))
    assert middle.path_tokens()[-1] == stop


def test_refresh_makes_approximate_paths_exact(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 10, temperature=0)
    fast = loom.splice(kid, 2, 3, " slow", exact=False)
    assert not loom.is_exact(fast)
    loom.refresh(fast)
    assert loom.is_exact(fast)
    assert_matches_recompute(loom, fast)


def test_pick_makes_a_branch_without_a_forward_pass(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 6, temperature=0)
    position = node.end + 2
    alternatives = kid.top[2]
    alternative, logprob = alternatives[4]
    with ForwardCounter(loom) as counter:
        picked = loom.pick(kid, position, alternative)
        assert counter.tokens == 0
        loom.next_logits(picked)
        assert counter.tokens == 1  # just the picked token, on the cached prefix
    assert loom.tokens(picked) == loom.tokens(kid)[:position] + [alternative]
    assert picked.logprobs == [pytest.approx(logprob)]
    assert picked.top[0] == alternatives
    assert_matches_recompute(loom, picked)
    # Picking the same alternative again reuses the branch.
    assert loom.pick(kid, position, alternative) is picked
    (more,) = loom.generate(picked, 4, temperature=0)
    assert_matches_recompute(loom, more)


def test_switching_branches_reuses_cached_kv(loom):
    node = loom.append(loom.root, PROMPT)
    kids = loom.generate(node, 8, n=3, temperature=1.0, seed=5)
    for kid in kids:
        assert_matches_recompute(loom, kid)
    with ForwardCounter(loom) as counter:
        for kid in kids:
            loom.next_logits(kid)
        # Each switch loads the cached sibling and computes at most its last token.
        assert counter.tokens <= len(kids)


def test_sampling_is_reproducible_with_a_seed(loom):
    node = loom.append(loom.root, PROMPT)
    (a,) = loom.generate(node, 10, temperature=1.0, seed=42)
    (b,) = loom.generate(node, 10, temperature=1.0, seed=42)
    (c,) = loom.generate(node, 10, temperature=1.0, seed=43)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens
    (g1,) = loom.generate(node, 10, temperature=0)
    (g2,) = loom.generate(node, 10, temperature=0, seed=99)
    assert g1.tokens == g2.tokens


def test_filters_restrict_the_choice(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 10, temperature=1.0, top_k=1, seed=1)
    for token, alts in zip(kid.tokens, kid.top):
        assert token == alts[0][0]  # top_k=1 is greedy
    (kid,) = loom.generate(node, 10, temperature=1.0, top_k=3, seed=2)
    for token, alts in zip(kid.tokens, kid.top):
        assert token in [t for t, _ in alts[:3]]


def test_n_siblings_run_as_one_batch_over_a_shared_prefix(loom):
    node = loom.append(loom.root, PROMPT * 3)
    per_token = node.kv.numel() * node.kv.element_size() // len(node.tokens)
    before = loom.kv_bytes().nodes  # 0: the prompt's KV is a view of the buffer
    with ForwardCounter(loom) as counter:
        kids = loom.generate(node, 6, n=8, temperature=1.0, seed=7)
    assert len(kids) == 8 and all(k.parent is node for k in kids)
    # One batch of 8 rows per step; the prefix was not recomputed.
    assert set(counter.batches) <= {1, 8}
    assert counter.batches.count(8) >= 1
    assert counter.tokens <= 8 * 6 + 1
    new_tokens = sum(len(k.tokens) for k in kids)
    memory = loom.kv_bytes()
    # The first child's KV stays in the working buffer with the prefix; the other seven
    # hold only their own tokens: 8 x the new tokens, not 8 x the path.
    assert memory.nodes - before == (new_tokens - len(kids[0].tokens)) * per_token
    assert memory.working <= per_token * (loom.runner.work.length + WorkingCache.GRANULE)
    assert len({tuple(k.tokens) for k in kids}) > 1
    for kid in kids:
        assert_matches_recompute(loom, kid)


def test_streaming_and_cancel(loom):
    node = loom.append(loom.root, PROMPT)
    seen: list[tuple[int, int, str]] = []
    cancel = threading.Event()

    def on_token(child, token, piece):
        seen.append((child.id, token, piece))
        if len(seen) == 5:
            cancel.set()

    (kid,) = loom.generate(node, 50, temperature=1.0, seed=1, on_token=on_token, cancel=cancel)
    assert len(kid.tokens) == 5  # stopped within one token, keeping what came
    assert [t for _, t, _ in seen] == kid.tokens
    assert {i for i, _, _ in seen} == {kid.id}
    assert "".join(p for _, _, p in seen) == loom.decode(kid.tokens)
    assert_matches_recompute(loom, kid)


def test_generation_stops_at_end_of_sequence(loom):
    node = loom.append(loom.root, PROMPT)
    # Make the end token overwhelmingly likely by picking it as an alternative path:
    eos = next(iter(loom.eos_ids))
    ended = loom.append_tokens(node, [eos])
    assert_matches_recompute(loom, ended)
    kids = loom.generate(node, 30, n=4, temperature=1.0, seed=11)
    for kid in kids:
        if eos in kid.tokens:
            assert kid.tokens.index(eos) == len(kid.tokens) - 1
        assert_matches_recompute(loom, kid)


def test_nothing_is_ever_destroyed(loom):
    node = loom.append(loom.root, PROMPT)
    (kid,) = loom.generate(node, 8, temperature=0)
    paths = {n.id: loom.tokens(n) for n in loom.tree.nodes.values()}
    loom.truncate(kid, 5)
    loom.splice(kid, 2, 6, " X", exact=True)
    loom.splice(kid, 2, 6, " Y", exact=False)
    loom.edit(kid, loom.text(kid) + " tail", exact=True)
    loom.pick(kid, 3, kid.top[0][1][0])
    for node_id, tokens in paths.items():
        assert loom.tokens(loom.tree.nodes[node_id]) == tokens


def test_errors_are_clear_and_typed(loom):
    node = loom.append(loom.root, PROMPT)
    n = node.end
    cases = [
        (lambda: loom.truncate(node, n + 1), EditRangeError),
        (lambda: loom.truncate(node, -1), EditRangeError),
        (lambda: loom.splice(node, 3, 2, "x"), EditRangeError),
        (lambda: loom.splice(node, 0, n + 5, "x"), EditRangeError),
        (lambda: loom.splice(node, 2, 2, ""), EmptyEditError),
        (lambda: loom.edit(node, PROMPT), EmptyEditError),
        (lambda: loom.append(node, ""), EmptyEditError),
        (lambda: loom.pick(node, n, 1), EditRangeError),
        (lambda: loom.append_tokens(node, [10**9]), InputError),
        (lambda: loom.generate(node, 5, temperature=-1), InputError),
        (lambda: loom.generate(node, 5, top_p=0), InputError),
        (lambda: loom.next_logits(loom.root), EmptyEditError),
    ]
    for call, kind in cases:
        with pytest.raises(kind) as info:
            call()
        assert isinstance(info.value, LoomError)
        message = str(info.value)
        assert message and "\n" not in message
    assert loom.tokens(node) == loom.encode(PROMPT)


def test_a_generation_cancelled_at_once_leaves_no_empty_node(loom):
    node = loom.append(loom.root, PROMPT)
    cancel = threading.Event()
    cancel.set()
    assert loom.generate(node, 10, cancel=cancel) == []
    assert loom.generate(node, 0) == []
    assert node.children == []
    assert_matches_recompute(loom, node)
    (kid,) = loom.generate(node, 3, temperature=0)
    assert_matches_recompute(loom, kid)
