"""Memory, author's note and world info in the loom: exact, and what they cost.

Every logits result is checked against a plain forward over ``loom.context_tokens``;
costs are the tokens the model really ran (a forward hook, ``ForwardCounter``) and the
runner's own count (``ContextKV.computed``).
"""

from __future__ import annotations

import pytest

from loomterm.errors import InputError
from loomterm.sessions.session import close_session, open_loom, save_loom
from tests.helpers import ForwardCounter, reference_logits, relative_error

WI = {"entries": [{"keys": ["fox"], "text": "A fox is red."}]}
STORY = "Once upon a time\nthe fox\njumps over\nthe lazy dog."


def check(loom, node):
    """next_logits equals a recompute of exactly what the model sees."""
    err = relative_error(loom.next_logits(node), reference_logits(loom, loom.context_tokens(node)))
    assert err < 1e-4, f"context logits differ from a recompute by {err:.1e}"


def computed(loom) -> int:
    return loom.runner.cache.context.computed


def test_every_injection_equals_a_recompute(loom):
    node = loom.append(loom.root, STORY)
    loom.update_settings(memory="The weaver.", authors_note="[terse]", world_info=WI)
    layout = loom.context_layout(node)
    assert [kind for kind, _, _ in layout.injected()] == ["memory", "world_info", "authors_note"]
    text = loom.decode(layout.tokens)
    assert text.startswith("The weaver.\nA fox is red.\nOnce upon")
    assert "a time\n[terse]\nthe fox" in text  # depth 3: the third line from the end
    check(loom, node)
    kids = loom.generate(node, 6, n=2, seed=3, temperature=1.0)
    for kid in kids:
        check(loom, kid)
    for settings in (
        dict(memory=""),
        dict(authors_note_depth=0),
        dict(authors_note=""),
        dict(world_info={"entries": []}),
    ):
        loom.update_settings(**settings)
        check(loom, kids[0])
    assert loom.context_tokens(kids[0]) == loom.tokens(kids[0])  # all off: the plain path


def test_generated_children_record_their_context_and_regenerate_with_it(loom):
    node = loom.append(loom.root, STORY)
    plain = loom.generate(node, 3, seed=1)[0]
    assert loom.context_version(plain) == ""
    loom.update_settings(memory="Old memory.")
    old = loom.generate(node, 3, seed=1)[0]
    version = loom.context_version(old)
    assert version and version in loom.contexts.versions
    loom.update_settings(memory="New memory.")
    new = loom.generate(node, 3, seed=1)[0]
    assert loom.context_version(new) not in ("", version)
    # Regenerate with the old node's context: same seed, same context, same tokens.
    again = loom.generate(node, 3, seed=1, context=version)[0]
    assert again.tokens == old.tokens and loom.context_version(again) == version
    assert loom.context_tokens(node, version)[:3] == loom.encode("Old memory.\n")[:3]
    again_plain = loom.generate(node, 3, seed=1, context="")[0]
    assert again_plain.tokens == plain.tokens and "context" not in again_plain.meta
    with pytest.raises(InputError, match="no context version"):
        loom.generate(node, 3, context="feedfacecafe")


def test_memory_is_computed_once_for_every_branch(llama_loom):
    loom = llama_loom
    loom.update_settings(memory="A long memory of the weaver, " * 6)
    memory = len(loom.encode("A long memory of the weaver, " * 6 + "\n"))
    with ForwardCounter(loom) as count:
        a = loom.append(loom.root, "Once upon a time")
        assert count.tokens == memory + a.end  # the memory, computed here once
        count.reset()
        b = loom.append(loom.root, "The quick brown fox")
        assert count.tokens == b.end
        for node in (a, b, a, b):
            count.reset()
            loom.next_logits(node)
            assert count.tokens == node.end  # only the branch, never the memory again
        # A plain-context generation overwrote the buffer; memory's KV was kept.
        loom.generate(a, 2, seed=1, context="")
        count.reset()
        loom.next_logits(b)
        assert count.tokens == b.end
        # Cleared, it is freed (the KV figures drop it): back on, computed once again.
        loom.update_settings(memory="")
        loom.next_logits(a)
        loom.update_settings(memory="A long memory of the weaver, " * 6)
        count.reset()
        loom.next_logits(b)
        assert count.tokens == memory + b.end
    check(loom, b)


def test_moving_the_author_note_recomputes_only_after_its_old_place(llama_loom):
    loom = llama_loom
    loom.update_settings(memory="The weaver.", authors_note="[terse]", authors_note_depth=1)
    node = loom.append(loom.root, "line one\nline two\nline three")
    loom.next_logits(node)
    note = len(loom.encode("[terse]\n"))
    old = loom.context_layout(node).note_at
    grown = loom.append(node, " and more")  # the same line grows: the note stays
    assert loom.context_layout(grown).note_at == old
    assert computed(loom) == grown.end - node.end  # just the new tokens
    moved = loom.append(grown, "\nline four")  # a new line: the note moves down
    assert loom.context_layout(moved).note_at > old
    # From its old place on: the document between the places, the note, the new line.
    assert computed(loom) == (moved.end - old) + note
    loom.next_logits(moved)
    assert computed(loom) == 0  # known
    assert computed(loom) < len(loom.context_tokens(moved)) - 10  # never the whole window
    check(loom, moved)


def test_author_note_alone_reuses_the_document_kv_above_it(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, "line one\nline two\nline three\nline four")
    loom.next_logits(node)  # plain: node KV for the whole path
    loom.update_settings(authors_note="[terse]", authors_note_depth=1)
    with ForwardCounter(loom) as count:
        loom.next_logits(node)
        at = loom.context_layout(node).note_at
        assert count.tokens == len(loom.encode("[terse]\n")) + node.end - at
    check(loom, node)


def test_a_full_window_keeps_the_memory_and_stays_exact(family, tiny_llama_dir, tiny_gpt2_dir):
    from tests.helpers import make_loom

    loom = make_loom(tiny_llama_dir if family == "llama" else tiny_gpt2_dir, n_ctx=48)
    loom.update_settings(memory="The weaver.", authors_note="[terse]", authors_note_depth=1)
    node = loom.append(loom.root, "Once upon a time, in a land far away, there lived a weaver.")
    tip = node
    for seed in range(4):
        kids = loom.generate(tip, 20, n=2, seed=seed, temperature=1.0)
        for kid in kids:
            seen = loom.context_tokens(kid)
            assert len(seen) <= 48
            assert seen[: len(loom.encode("The weaver.\n"))] == loom.encode("The weaver.\n")
            check(loom, kid)
        tip = kids[0]
    assert tip.end > 48  # the path outgrew the window; the memory never left it


def test_contexts_are_saved_reopened_and_exported(llama_loom, tmp_path):
    from loomterm.export.json_tree import from_json_dict, to_json_dict
    from loomterm.store import load

    loom = llama_loom
    node = loom.append(loom.root, STORY)
    loom.update_settings(memory="Remember.", world_info=WI)
    kid = loom.generate(node, 3, seed=2)[0]
    version = loom.context_version(kid)
    path = tmp_path / "ctx.loom"
    save_loom(loom, path)
    loom.update_settings(memory="Changed.")  # recorded after the save
    kid2 = loom.generate(node, 2, seed=2)[0]
    close_session(loom)
    data = load(path)
    assert set(data.contexts) == {version, loom.context_version(kid2)}
    assert data.settings["memory"] == "Changed."
    exported = to_json_dict(data)
    assert exported["contexts"][version]["memory"] == "Remember."
    assert from_json_dict(exported).contexts == data.contexts
    reopened = open_loom(path)
    try:
        same = reopened.tree.nodes[kid.id]
        assert reopened.context_version(same) == version
        assert reopened.context_spec(version).memory == "Remember."
        again = reopened.generate(reopened.tree.nodes[node.id], 3, seed=2, context=version)[0]
        assert again.tokens == kid.tokens
    finally:
        close_session(reopened)


def test_typed_text_gets_records_and_banned_phrases_work_under_a_context(llama_loom):
    import torch

    loom = llama_loom
    loom.update_settings(memory="The weaver.", authors_note="[terse]", authors_note_depth=1)
    node = loom.append(loom.root, "Once upon a time\nthe fox")
    seen = loom.context_tokens(node)
    # The records of the typed tokens are what the model saw predicting them.
    last = reference_logits(loom, seen[:-1]).log_softmax(-1)
    assert node.logprobs[-1] == pytest.approx(float(last[seen[-1]]), abs=1e-4)
    assert all(lp is not None for lp in node.logprobs[1:])
    kids = loom.generate(node, 8, n=2, seed=5, temperature=1.0, banned_strings=["fox"])
    for kid in kids:
        assert "fox" not in loom.decode(kid.tokens)
        check(loom, kid)
    assert torch.isfinite(loom.next_logits(kids[0])).all()
