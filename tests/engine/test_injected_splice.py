"""A fast splice under memory, world info or an author's note moves the suffix's KV.

The working buffer holds the assembled context; a fast splice keeps its columns of the
unchanged suffix (the author's note among them) and puts them, keys re-rotated, at
their new columns: only the inserted tokens and the last one are computed, the copies
are flagged approximate, and the logits stay close to an exact splice's. Exact
operations still equal a recompute of ``loom.context_tokens``. Token counts are a
forward hook's (``ForwardCounter``), not the runner's own.
"""

from __future__ import annotations

import pytest

from tests.helpers import ForwardCounter, reference_logits, relative_error

MEMORY = "The weaver remembers every thread she ever spun, and the colour of each."
LINES = [
    "Once upon a time there was a weaver who lived by the river.",
    "Every morning she sat at her loom and wove the day's first thread.",
    "The village came to watch, and the children asked for stories.",
    "She told them of foxes and of the moon, of rivers and of kings.",
    "One winter a stranger came, carrying a spindle made of glass.",
    "He said the spindle would spin whatever the weaver dreamed.",
]


def _kl(want, got) -> float:
    p, q = want.float().log_softmax(-1), got.float().log_softmax(-1)
    return float((p.exp() * (p - q)).sum())


def check(loom, node):
    """next_logits equals a recompute of exactly what the model sees."""
    err = relative_error(loom.next_logits(node), reference_logits(loom, loom.context_tokens(node)))
    assert err < 1e-4, f"context logits differ from a recompute by {err:.1e}"


def story(loom, chunks: int = 3):
    """A document of a few hundred tokens in several nodes (the cursor's path)."""
    node = loom.root
    for _ in range(chunks):
        for line in LINES:
            node = loom.append(node, line + "\n")
    return node


@pytest.mark.parametrize(
    "settings",
    [
        dict(memory=MEMORY),
        dict(memory=MEMORY, authors_note="[a slow, quiet story]", authors_note_depth=3),
        dict(authors_note="[a slow, quiet story]", authors_note_depth=2),
    ],
    ids=["memory", "memory+note", "note"],
)
def test_fast_splice_near_the_top_moves_the_suffix(llama_loom, settings):
    loom = llama_loom
    loom.update_settings(**settings)
    node = story(loom)
    assert node.end > 300 and len(node.path()) > 10
    loom.next_logits(node)  # the editor's state: the buffer holds the document
    insert = loom.encode(" old and patient")
    seen = len(loom.context_tokens(node))
    with ForwardCounter(loom) as count:
        fast = loom.splice_tokens(node, 5, 6, insert, exact=False)
    # The inserted tokens, the token before them at most, and the last one.
    assert count.tokens <= len(insert) + 2, f"{count.tokens} of {seen} tokens computed"
    assert not loom.is_exact(fast)
    path = fast.path()
    inserted = next(i for i, n in enumerate(path) if n.tokens == insert)
    assert not any(n.approx for n in path[: inserted + 1])  # computed, exactly
    assert all(n.approx for n in path[inserted + 1 :])  # moved, as the plain fast splice
    want = reference_logits(loom, loom.context_tokens(fast))
    got = loom.next_logits(fast)
    assert _kl(want, got) < 0.05
    # The exact splice still equals a recompute, and refresh makes the fast one exact.
    exact = loom.splice_tokens(node, 5, 6, insert, exact=True)
    assert loom.is_exact(exact) and loom.tokens(exact) == loom.tokens(fast)
    check(loom, exact)
    loom.refresh(fast)
    assert loom.is_exact(fast)
    check(loom, fast)


def test_a_note_that_moves_is_recomputed_from_its_place(llama_loom):
    """A splice in the last lines that adds a line: the note moves, so the columns from
    the splice on are computed (the note's old place is no longer the sequence's)."""
    loom = llama_loom
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=2)
    node = story(loom, 2)
    loom.next_logits(node)
    at = node.end - 8
    fast = loom.splice(node, at, at, "\nA new line.\n", exact=False)
    assert not loom.is_exact(fast)
    want = reference_logits(loom, loom.context_tokens(fast))
    assert _kl(want, loom.next_logits(fast)) < 0.05
    assert loom.runner.cache.context.computed < 40  # never the document


def test_truncate_and_the_next_logits_stay_exact_after_a_moved_suffix(llama_loom):
    loom = llama_loom
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=1)
    node = story(loom, 2)
    loom.next_logits(node)
    fast = loom.splice(node, 3, 4, " quiet", exact=False)
    loom.next_logits(fast)
    # Back on the untouched branch, and cut short on it: exact, as a recompute.
    check(loom, node)
    cut = loom.truncate(node, node.end - 30)
    with ForwardCounter(loom) as count:
        loom.next_logits(cut)
    check(loom, cut)
    assert count.tokens < 40  # from the note's new place on, not the document
    # A child generated from the spliced branch inherits the approximation.
    kid = loom.generate(fast, 4, seed=1)[0]
    assert not loom.is_exact(kid)


def test_a_splice_on_a_branch_the_buffer_does_not_hold_is_still_right(llama_loom):
    loom = llama_loom
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=2)
    a = story(loom, 1)
    b = loom.append(loom.root, "A different story, about a fox.\nIt ran.\n")
    loom.next_logits(b)  # the buffer holds the other branch
    spliced = loom.splice(a, 4, 5, " bright", exact=False)
    check(loom, spliced)  # nothing held: computed, exactly


def test_absolute_positions_splice_exactly_under_memory(gpt2_loom):
    loom = gpt2_loom
    loom.update_settings(memory=MEMORY, authors_note="[terse]", authors_note_depth=2)
    node = story(loom, 1)
    loom.next_logits(node)
    spliced = loom.splice(node, 4, 5, " bright", exact=False)  # asks for fast...
    assert loom.is_exact(spliced)  # ...gets exact
    check(loom, spliced)
