"""Typed, pasted and imported tokens get their log-probability and top alternatives
from the prefill that computes their KV anyway, and they equal a full recompute."""

from __future__ import annotations

import torch

from loomterm.sessions.session import close_session, load_session, open_loom, save_loom
from tests.helpers import ForwardCounter, make_loom

TEXT = "The old loom stood in the corner, its threads still taut after all these years."
ABS_TOL = 1e-4  # log-probabilities, float32


@torch.inference_mode()
def recompute_records(loom, tokens: list[int]):
    """Per position i >= 1: log p(tokens[i] | tokens[:i]) and the top-10, from one plain
    transformers forward with its own attention."""
    config = loom.runner.model.config
    saved, config._attn_implementation = config._attn_implementation, "sdpa"
    try:
        logits = loom.runner.model(input_ids=torch.tensor([tokens])).logits[0].float()
    finally:
        config._attn_implementation = saved
    logprobs = logits.log_softmax(-1)  # (T, V)
    out = {}
    for i in range(1, len(tokens)):
        top_lp, top_ids = logprobs[i - 1].topk(10)
        out[i] = (float(logprobs[i - 1, tokens[i]]), top_ids.tolist(), top_lp.tolist())
    return out


def assert_records_match(loom, node, first: int = 1):
    """Every token of ``node``'s path from path position ``first`` on has the records a
    recompute gives."""
    tokens = loom.tokens(node)
    want = recompute_records(loom, tokens)
    position = 0
    checked = 0
    for item in node.path():
        for i, _token in enumerate(item.tokens):
            if position >= first:
                logprob, ids, lps = want[position]
                assert item.logprobs[i] is not None, f"no record at {position}"
                assert abs(item.logprobs[i] - logprob) < ABS_TOL, position
                assert [t for t, _ in item.top[i]] == ids, position
                assert max(abs(a - b) for (_, a), b in zip(item.top[i], lps)) < ABS_TOL
                checked += 1
            position += 1
    return checked


def test_typed_text_gets_records_that_equal_a_recompute(loom):
    node = loom.append(loom.root, TEXT)
    assert node.logprobs[0] is None  # nothing comes before the first token
    assert assert_records_match(loom, node) == len(node.tokens) - 1
    more = loom.append(node, " Nobody used it now.")
    assert assert_records_match(loom, more) == more.end - 1


def test_records_cost_no_extra_forward_pass(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, TEXT)
    with ForwardCounter(loom) as counter:
        more = loom.append(node, " A second sentence, typed.")
    assert counter.tokens == len(more.tokens)  # only the new tokens were computed
    assert all(lp is not None for lp in more.logprobs)


def test_the_first_typed_token_after_a_branch_switch_has_its_record(loom):
    base = loom.append(loom.root, TEXT)
    a = loom.append(base, " One way.")
    b = loom.append(base, " Another way.")
    loom.next_logits(a)  # the working cache now ends after ``a``
    c = loom.append(b, " Typed after switching.")  # ``b``'s KV is loaded, not computed
    assert c.logprobs[0] is not None
    assert_records_match(loom, c)


def test_generated_records_stay_the_model_s_own(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, TEXT)
    (kid,) = loom.generate(node, 8, temperature=1.0, seed=3)
    before = (list(kid.logprobs), [list(t) for t in kid.top])
    loom.append(kid, " And then typed.")
    assert (kid.logprobs, kid.top) == before
    assert_records_match(loom, kid.children[0])


def test_spliced_and_edited_text_gets_records(loom):
    node = loom.append(loom.root, TEXT)
    fast = loom.splice(node, 3, 4, " sturdy", exact=False)
    exact = loom.splice(node, 3, 4, " sturdy", exact=True)
    for tail in (fast, exact):
        inserted = next(n for n in tail.path() if n.origin.value == "edit")
        assert all(lp is not None for lp in inserted.logprobs)
    # Exact: everything after the edit is computed again in its new context, records too.
    assert_records_match(loom, exact)
    edited = loom.edit(exact, loom.text(exact).replace("corner", "hall"), exact=True)
    assert_records_match(loom, edited)


def test_records_can_be_turned_off(llama_loom):
    loom = llama_loom
    loom.runner.keep_records = False
    node = loom.append(loom.root, TEXT)
    assert all(lp is None for lp in node.logprobs)


def test_an_alternative_of_a_typed_token_branches_there(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, TEXT)
    position = 5
    tokens, top = loom.tokens(node), dict(node.top[position])
    alternative = next(t for t in top if t != tokens[position])
    picked = loom.pick(node, position, alternative)  # splits ``node`` at ``position``
    assert loom.tokens(picked) == tokens[:position] + [alternative]
    assert picked.logprobs[0] == top[alternative]


def test_records_reach_the_session_file_and_come_back(tiny_llama_dir, tmp_path):
    loom = make_loom(tiny_llama_dir)
    path = tmp_path / "typed.loom"
    save_loom(loom, path)
    node = loom.append(loom.root, TEXT)
    close_session(loom)
    stored = load_session(path).tree.nodes[node.id]
    assert stored.logprobs[1:] == node.logprobs[1:] and stored.top[1:] == node.top[1:]

    # A file whose typed tokens have no records (an older loomterm, an import) gets them
    # when the reopened loom computes the KV, and keeps them.
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tokens SET logprob = NULL, top = NULL")
    assert all(lp is None for lp in load_session(path).tree.nodes[node.id].logprobs)
    again = open_loom(path)
    again.next_logits(again.tree.nodes[node.id])
    close_session(again)
    reread = load_session(path).tree.nodes[node.id]
    assert all(lp is not None for lp in reread.logprobs[1:])
    assert all(abs(a - b) < ABS_TOL for a, b in zip(reread.logprobs[1:], node.logprobs[1:]))
