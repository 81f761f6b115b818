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


def test_a_full_window_in_a_batch_keeps_each_rows_own_note(tiny_llama_dir, monkeypatch):
    """Rows that wrote different line breaks re-assemble with the note in different
    places; each row's steps still equal a recompute of its own sequence (refilled in
    chunks of 5 columns here, so the chunk loop is checked too)."""
    from loomterm.engine.local import context_kv

    monkeypatch.setattr(context_kv, "REFILL_CHUNK", 5)
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


# -- drafted decoding under an injected context ------------------------------------------
PROMPT = "Once upon a time, in a land far away, there lived a weaver who wove stories."


def inject(loom) -> None:
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=1)
    loom.update_settings(world_info={"entries": [{"keys": ["weaver"], "text": "Ada weaves."}]})


def drafted(loom, node, mode, *args, **kwargs):
    loom.update_settings(drafting=mode)
    (kid,) = loom.generate(node, *args, **kwargs)
    return kid, loom.last_result.drafting


def test_greedy_drafting_under_an_injected_context_equals_plain(loom):
    from tests.helpers import ForwardCounter

    inject(loom)
    node = loom.append(loom.root, PROMPT)
    plain, none = drafted(loom, node, "off", 40, temperature=0)
    assert none is None
    first, _ = drafted(loom, node, "tree", 40, temperature=0)
    again, stats = drafted(loom, node, "tree", 40, temperature=0)  # siblings are drafts
    assert stats is not None and stats.accepted > 0 and stats.steps < 40  # drafts worked
    assert first.tokens == plain.tokens == again.tokens
    for kid in (first, again):
        assert kid.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
        assert kid.kv is None  # its columns sat after the injected text
        assert loom.context_version(kid) == loom.context_version(plain)
    # The buffer holds the assembled context of the child: its logits are known...
    with ForwardCounter(loom) as count:
        logits = loom.next_logits(again)
        assert count.tokens == 0
    # ...and equal a recompute of exactly what the model sees.
    want = reference_logits(loom, loom.context_tokens(again))
    assert relative_error(logits, want) < 1e-4
    # Every drafted token is the argmax of a recompute of the sequence it followed.
    seen = loom.context_tokens(node)
    for i, token in enumerate(again.tokens):
        assert reference_logits(loom, seen + again.tokens[:i]).argmax().item() == token


def test_sampled_drafting_under_an_injected_context_keeps_the_seed(loom):
    inject(loom)
    node = loom.append(loom.root, PROMPT)
    accepted = 0
    for seed in range(3):
        plain, _ = drafted(loom, node, "off", 25, temperature=0.8, top_k=20, seed=seed)
        kid, stats = drafted(loom, node, "tree", 25, temperature=0.8, top_k=20, seed=seed)
        assert kid.tokens == plain.tokens
        assert kid.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
        accepted += stats.accepted
    assert accepted > 0  # the drafts (the plain siblings) were verified and taken


def test_drafting_under_an_injected_context_needs_the_context_to_fit(tiny_llama_dir):
    from loomterm.engine.generation import GenerateRequest
    from loomterm.engine.sample.chain import SamplingParams

    loom = make_loom(tiny_llama_dir, n_ctx=128)
    inject(loom)
    node = loom.append(loom.root, PROMPT)
    columns = len(loom.context_tokens(node))
    loom.next_logits(node)

    def config(max_new_tokens):
        request = GenerateRequest(node, max_new_tokens, 1, SamplingParams(), drafting="tree")
        return loom.runner.drafting_for(request)

    block = config(1)
    assert block is not None
    room = loom.n_ctx - columns - block.tree_budget - 1  # the injected text counts
    assert config(room) is not None and config(room + 1) is None
    kid, stats = drafted(loom, node, "tree", room + 30, temperature=0)
    assert stats is None and len(kid.tokens) == room + 30  # plainly, refilling the window


# -- the memory's kept KV in the figures and the budget ----------------------------------
def test_the_kept_memory_kv_is_counted_and_freed_when_cleared(llama_loom):
    loom = llama_loom
    node = loom.append(loom.root, PROMPT)
    other = loom.append(loom.root, "A different branch, with KV of its own.")
    loom.next_logits(node)
    plain = loom.kv_bytes()
    assert plain.context == 0
    loom.update_settings(memory="A long memory of the weaver, " * 4)
    loom.next_logits(node)
    layers, heads, dim = loom.runner.kv_geometry()
    columns = len(loom.context_tokens(node)) - node.end  # start tokens: none here
    assert columns == len(loom.encode("A long memory of the weaver, " * 4 + "\n"))
    size = layers * 2 * heads * dim * 4 * columns  # float32 keys and values
    held = loom.kv_bytes()
    assert held.context == size
    assert held.total == held.nodes + held.working + size
    # The budget sees it: a budget the rest fits in, but not with it, evicts a branch.
    loom.runner.kv_budget = held.total - size // 2
    assert other.kv is not None
    loom.runner.enforce_budget(node.path())
    assert other.kv is None
    assert loom.kv_bytes().context == size  # pinned: the memory is in use
    loom.runner.kv_budget = 1 << 40
    before = loom.kv_bytes()
    loom.update_settings(memory="")  # cleared: freed at once
    after = loom.kv_bytes()
    assert after.context == 0 and after.total == before.total - size


# -- penalties read what the model sees ----------------------------------------------------
def penalised_steps(loom, node, kid, **sampling):
    """Each of ``kid``'s tokens is the argmax of a recompute of the sequence the model
    saw for it, after the logit bias, penalties and DRY over the context the generation
    started from and the tokens since (a refilled window leaves that history alone, as
    a context shift leaves llama.cpp's sampler's)."""
    import torch

    from loomterm.engine.sample.chain import SamplerState, SamplingParams, adjust_logits

    params = SamplingParams(temperature=0, **sampling)
    breakers = loom.runner.dry_breakers(params)
    state = SamplerState.start(params, 1, torch.device("cpu"), dry_breakers=breakers)
    history = loom.context_tokens(node)
    steps = seen_per_step(loom, node, kid, loom.n_ctx)
    for i, (seq, token) in enumerate(steps):
        past = torch.tensor([history + kid.tokens[:i]])
        want = adjust_logits(reference_logits(loom, seq)[None], params, past, state)[0]
        assert want.argmax().item() == token, f"token {i}"


@pytest.mark.parametrize("decoder", ["plain", "drafted", "banned"])
def test_a_memory_token_is_penalised(llama_loom, decoder):
    loom = llama_loom
    loom.update_settings(memory="Zebra zebra zebra.")
    node = loom.append(loom.root, PROMPT)
    zebra = loom.encode(" zebra")[-1]
    assert zebra in loom.context_tokens(node) and zebra not in node.path_tokens()
    extra = {"drafting": "tree" if decoder == "drafted" else "off"}
    if decoder == "banned":
        extra["banned_strings"] = ["qqqq"]
    if decoder == "drafted":
        loom.generate(node, 12, temperature=0, drafting="off")  # a sibling to draft from

    logits = loom.next_logits(node)
    bias = float(logits.max() - logits[zebra]) + 0.5  # just enough to make it the argmax

    def first(**sampling):
        (kid,) = loom.generate(
            node, 12, temperature=0, logit_bias={str(zebra): bias}, **extra, **sampling
        )
        return kid

    assert first().tokens[0] == zebra  # the bias makes it the model's choice...
    penalties = dict(presence_penalty=1.0, frequency_penalty=1.0)  # -4 for three in memory
    kid = first(**penalties)
    assert kid.tokens[0] != zebra  # ...but it is in the memory: penalised
    if decoder != "banned":
        assert (loom.last_result.drafting is not None) == (decoder == "drafted")
    penalised_steps(loom, node, kid, logit_bias={zebra: bias}, **penalties)
    # A penalty window that ends before the memory leaves it alone, as llama.cpp's.
    short = first(penalty_last_n=4, **penalties)
    assert short.tokens[0] == zebra


def test_penalties_over_the_context_past_a_full_window(tiny_llama_dir):
    loom = make_loom(tiny_llama_dir, n_ctx=48)
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=1)
    node = loom.append(loom.root, START)
    assert len(loom.context_tokens(node)) > 40  # the window fills within the generation
    (kid,) = loom.generate(node, 30, temperature=0, repetition_penalty=1.6, drafting="off")
    penalised_steps(loom, node, kid, repetition_penalty=1.6)
    # DRY reads the memory too: the memory's words, repeated, are broken off.
    dry = dict(dry_multiplier=2.0, dry_allowed_length=1)
    (kid,) = loom.generate(node, 30, temperature=0, drafting="off", **dry)
    penalised_steps(loom, node, kid, **dry)
