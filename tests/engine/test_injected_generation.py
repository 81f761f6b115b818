"""Generating under memory, author's note and world info: past the window, drafted,
counted in the KV figures, penalised over what the model sees.

Every step is checked against a plain forward (``reference_logits``) over the sequence
the model saw for it, rebuilt here from the pure assembly (``engine.context``).
"""

from __future__ import annotations

import pytest

from tests.helpers import make_loom, reference_logits, relative_error

MEMORY = "The weaver."
START = "Once upon a time, in a land far away, there lived a weaver.\nShe wove"


def no_eos(loom) -> dict:
    return {"logit_bias": {str(t): "never" for t in loom.eos_ids}}


def seen_per_step(loom, node, kid, n_ctx: int):
    """The sequence the model saw before each of ``kid``'s tokens: the parent's
    context, grown token by token, and re-assembled for the longer path (with the
    world info it started with) whenever it filled the window."""
    layout = loom.context_layout(node)
    wi = [piece.tokens for piece in layout.pieces if piece.kind == "world_info"]
    path, seq = node.path_tokens(), list(layout.tokens)
    spec = loom.context_spec()
    for token in kid.tokens:
        yield seq, token
        path.append(token)
        if len(seq) >= n_ctx:
            seq = loom.contexts.assemble(path, spec, n_ctx, world_info=wi).tokens
        else:
            seq = [*seq, token]


@pytest.mark.parametrize("n", [1, 3])
def test_generation_under_an_injected_context_runs_past_n_ctx(
    family, tiny_llama_dir, tiny_gpt2_dir, n
):
    loom = make_loom(tiny_llama_dir if family == "llama" else tiny_gpt2_dir, n_ctx=48)
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=1)
    loom.update_settings(world_info={"entries": [{"keys": ["weaver"], "text": "Ada weaves."}]})
    node = loom.append(loom.root, START)
    assert [k for k, _, _ in loom.context_layout(node).injected()][1] == "world_info"
    memory = loom.encode(MEMORY + "\n")
    kids = loom.generate(node, 90, n=n, seed=4, temperature=1.0, **no_eos(loom))
    refills = 0
    for kid in kids:
        assert len(kid.tokens) == 90  # all of them: the window was refilled, not stopped
        assert kid.end > 2 * 48 and loom.is_exact(kid)
        last = 0
        for i, (seq, token) in enumerate(seen_per_step(loom, node, kid, 48)):
            assert len(seq) <= 48 and seq[: len(memory)] == memory
            want = reference_logits(loom, seq).log_softmax(-1)
            assert kid.logprobs[i] == pytest.approx(float(want[token]), abs=2e-4), i
            refills += len(seq) < last
            last = len(seq)
        seen = loom.context_tokens(kid)
        assert seen[: len(memory)] == memory and len(seen) <= 48
        err = relative_error(loom.next_logits(kid), reference_logits(loom, seen))
        assert err < 1e-4
    assert refills >= 2 * n  # the window really was refilled, more than once per row


def test_a_full_window_in_a_batch_keeps_each_rows_own_note(tiny_llama_dir):
    """Rows that wrote different line breaks re-assemble with the note in different
    places; each row's steps still equal a recompute of its own sequence."""
    loom = make_loom(tiny_llama_dir, n_ctx=40)
    loom.update_settings(memory=MEMORY, authors_note="[note]", authors_note_depth=2)
    newline = loom.encode("\n")
    bias = {**no_eos(loom)["logit_bias"], str(newline[-1]): 4.0}  # many line breaks
    node = loom.append(loom.root, START)
    kids = loom.generate(node, 60, n=4, seed=9, temperature=1.0, logit_bias=bias)
    assert len({tuple(k.tokens) for k in kids}) > 1
    for kid in kids:
        assert len(kid.tokens) == 60 and kid.end > 40
        for i, (seq, token) in enumerate(seen_per_step(loom, node, kid, 40)):
            want = reference_logits(loom, seq).log_softmax(-1)
            assert kid.logprobs[i] == pytest.approx(float(want[token]), abs=2e-4), i
