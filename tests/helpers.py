"""Test helpers: build looms on tiny models and compare against full recomputes."""

from __future__ import annotations

import torch

from loomterm.engine import Loom
from loomterm.engine.models.load import load_model

# float32 noise: the tolerance is about 1e-4 relative.
REL_TOL = 1e-4


def make_loom(folder, **kwargs) -> Loom:
    """A fresh loom on a model folder (the tiny fixtures), on the CPU in float32."""
    return Loom.from_loaded(load_model(str(folder), device="cpu", dtype="float32"), **kwargs)


def window_tokens(loom: Loom, tokens: list[int]) -> list[int]:
    """What the model sees for a path of ``tokens``: all of it, or the context window."""
    shift = loom.runner.window.shift_for(len(tokens))
    if not shift:
        return tokens
    return tokens[: loom.runner.window.n_keep] + tokens[loom.runner.window.n_keep + shift :]


@torch.inference_mode()
def reference_logits(loom: Loom, tokens: list[int]) -> torch.Tensor:
    """A plain transformers forward over the tokens, no cache, with transformers' own
    attention (SDPA where loomterm installed its own, else the model's own, e.g. Gemma
    2's eager): (V,) float32."""
    ids = torch.tensor([window_tokens(loom, tokens)], device=loom.runner.device)
    config = loom.runner.model.config
    saved = config._attn_implementation
    config._attn_implementation = "sdpa" if saved == "loom" else saved
    try:
        return loom.runner.model(input_ids=ids).logits[0, -1].float()
    finally:
        config._attn_implementation = saved


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(
        (got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-9)
    )


def assert_same_greedy(loom: Loom, got, want, label: str = "", tol: float = REL_TOL) -> None:
    """Two greedy generations from one node wrote the same tokens, or they part where
    the two tokens tie in float32 noise: each path's first token of its own is one of
    the top two of a recompute there, and their logits differ by at most ``tol`` of
    the largest. Two ways of computing the same logits (a block of drafted tokens
    against one token a step) sum in another order, and on some CPUs (AVX2 builds of
    the kernels) such a tie turns the other way; anything more is a bug."""
    a, b = loom.tokens(got), loom.tokens(want)
    if a == b:
        return
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert at < min(len(a), len(b)), f"{label}: one generation is a prefix of the other"
    logits = reference_logits(loom, a[:at])
    top2 = set(torch.topk(logits, 2).indices.tolist())
    gap = float((logits[a[at]] - logits[b[at]]).abs())
    scale = float(logits.abs().max())
    assert {a[at], b[at]} == top2 and gap <= tol * scale, (
        f"{label}: the generations part at token {at} ({a[at]} against {b[at]}), "
        f"not a tie: logits differ by {gap:.3g} of {scale:.3g}"
    )


# The worst relative error any comparison saw in this run (reported at the end).
WORST = {"relative": 0.0, "checks": 0}


def assert_matches_recompute(loom: Loom, node, tol: float = REL_TOL) -> float:
    """next_logits(node) equals a full recompute of its tokens; returns the error."""
    err = relative_error(loom.next_logits(node), reference_logits(loom, loom.tokens(node)))
    WORST["relative"] = max(WORST["relative"], err)
    WORST["checks"] += 1
    assert err < tol, f"next_logits differs from a recompute by {err:.2e} (relative)"
    return err


class ForwardCounter:
    """Counts the tokens and batch rows the model really processes (a forward hook on
    the input embeddings, not a mock)."""

    def __init__(self, loom: Loom) -> None:
        self.tokens = 0
        self.calls = 0
        self.batches: list[int] = []
        embed = loom.runner.model.get_input_embeddings()
        self._handle = embed.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output) -> None:
        ids = inputs[0]
        self.calls += 1
        self.tokens += ids.shape[-1]
        self.batches.append(ids.shape[0])

    def reset(self) -> None:
        self.tokens, self.calls, self.batches = 0, 0, []

    def close(self) -> None:
        self._handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- sessions -------------------------------------------------------------------------


def ends_whole(loom: Loom, node) -> bool:
    """True when ``node``'s path ends on a whole character (no UTF-8 bytes pending)."""
    return loom.codec.complete_after(loom.tokens(node))[-1]


def split_characters(loom: Loom, node) -> list[str]:
    """Characters of ``node``'s text whose UTF-8 bytes are spread over two or more of its
    tokens (a token holding only their first bytes has an empty piece)."""
    pieces = loom.token_pieces(loom.tokens(node))[node.end - len(node.tokens) :]
    found = []
    for i, piece in enumerate(pieces):
        if piece or (i and not pieces[i - 1]):
            continue  # not the first token of a character's bytes
        following = next((p for p in pieces[i + 1 :] if p), "")
        if following and following[0] != "\ufffd":
            found.append(following[0])
    return found


def sample_tree(loom: Loom) -> Loom:
    """Build a small session on ``loom`` with real operations: branches, a split, a fast
    splice (re-rotated, approximate KV), every origin, chat-role and bookmark meta,
    characters split across tokens, and a cursor. Returns ``loom``.

    The seeds are fixed and chosen so that every node starts and ends on a whole
    character (checked below), so each node's text stands on its own.
    """
    from loomterm.tree import Origin

    prompt = loom.append(loom.root, "Once upon a time", role="user")
    first = loom.generate(prompt, 12, temperature=0.7, seed=8)[0]
    second = loom.generate(prompt, 8, temperature=0.0)[0]  # greedy, no seed
    edited = loom.splice(second, second.end, second.end, ' <edit> & "quotes"')
    edited.meta["bookmark"] = "favourite"
    loom.truncate(first, prompt.end + 5)  # splits the first reply
    # A fast splice inside it: the tokens after the change keep re-rotated KV.
    loom.splice(first, prompt.end + 2, prompt.end + 3, " caf\u00e9 \u65e5\u672c \U0001f600\n")
    loom.append(prompt, "\n\n# not a heading\n> not a quote", hidden=True)
    loom.cursor = edited

    nodes = list(loom.tree.nodes.values())
    assert all(ends_whole(loom, n) for n in nodes if n.tokens), "a node ends mid-character"
    assert any(n.approx for n in nodes), "the splice left no approximate node"
    assert {Origin(n.origin) for n in nodes} >= {Origin.USER, Origin.MODEL, Origin.EDIT}
    assert any(split_characters(loom, n) for n in nodes), "no character spans tokens"
    return loom


def tree_record(tree) -> list[tuple]:
    """Everything the file must keep about each node, for equality checks."""
    from loomterm.tree import Origin

    return [
        (
            node.id,
            node.parent.id if node.parent is not None else None,
            [child.id for child in node.children],
            list(node.tokens),
            list(node.logprobs),
            [None if top is None else [tuple(alt) for alt in top] for top in node.top],
            Origin(node.origin).value,
            bool(node.approx),
            node.sampling,
            node.seed,
            node.created,
            node.meta,
        )
        for node in sorted(tree.nodes.values(), key=lambda n: n.id)
    ]


# -- tests that need something from the machine ------------------------------------------
# CI sets this so that a test which cannot run there fails instead of skipping quietly.
REQUIRE_ALL = "LOOMTERM_REQUIRE_ALL_TESTS"


def require_or_skip(condition: object, reason: str) -> None:
    """Skip the calling test unless ``condition`` holds; with ``LOOMTERM_REQUIRE_ALL_TESTS``
    set (to anything but ``""`` or ``0``), fail it instead."""
    import os

    import pytest

    if condition:
        return
    if os.environ.get(REQUIRE_ALL, "") not in ("", "0"):
        pytest.fail(f"{reason} (and {REQUIRE_ALL} is set: this test must run)", pytrace=False)
    pytest.skip(reason)


def caret_writes(store) -> list:
    """The carets ``store.set_caret`` writes from now on, in order (each still written:
    the store's own method runs)."""
    writes: list = []
    real = store.set_caret

    def counting(caret) -> None:
        writes.append(caret)
        real(caret)

    store.set_caret = counting
    return writes


def build_log(line: str) -> None:
    """Show a build's progress line past pytest's capture (builds take minutes)."""
    import sys

    sys.__stderr__.write(f"\n{line}")
    sys.__stderr__.flush()
