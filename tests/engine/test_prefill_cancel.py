"""Stopping a long prefill (``Loom.interrupt``): it stops between two 512-token chunks
with ``PrefillCancelled``, the tree is whole (the edit or append that was being read is
in it), and what comes next is exactly what it would have been without the stop."""

from __future__ import annotations

import threading

import pytest
import torch

from loomterm.engine.local.path_cache import PREFILL_CHUNK
from loomterm.errors import LoomError, PrefillCancelled
from tests.helpers import make_loom, reference_logits

WORDS = "the loom wove a long and patient story of threads and colours "


@pytest.fixture
def loom(tiny_llama_dir):
    return make_loom(tiny_llama_dir, n_ctx=2048)


def long_text(loom, tokens: int) -> str:
    text = WORDS
    while len(loom.encode(text)) < tokens:
        text += WORDS
    return text


def stop_after_chunks(loom, chunks: int) -> list[tuple[int, int]]:
    """Set the loom's interrupt once ``chunks`` chunks are read; returns the progress."""
    event = threading.Event()
    seen: list[tuple[int, int]] = []

    def progress(stage: str, done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == chunks:  # once: cleared, the next read goes on
            event.set()

    loom.interrupt = event
    loom.progress = progress
    return seen


def test_an_append_stops_between_chunks_and_stays_whole(loom):
    text = long_text(loom, 3 * PREFILL_CHUNK)
    seen = stop_after_chunks(loom, 1)
    with pytest.raises(PrefillCancelled) as info:
        loom.append(loom.root, text)
    assert isinstance(info.value, LoomError) and str(info.value)
    node = info.value.node
    assert node is not None and node.parent is loom.root
    assert loom.text(node) == text  # in the tree, whole
    assert seen == [(PREFILL_CHUNK, seen[0][1])]  # one chunk was read, then it stopped
    assert node.kv is None or node.kv.shape[-2] < len(node.tokens)

    # Cleared, the next operation reads on and gets exactly the uncached logits.
    loom.interrupt.clear()
    logits = loom.next_logits(node)
    reference = reference_logits(loom, loom.tokens(node))
    torch.testing.assert_close(logits, reference, rtol=1e-4, atol=1e-4)
    assert len(seen) > 1 and seen[-1][0] == seen[-1][1]


def test_an_exact_edit_near_the_top_stops_and_keeps_the_edit(loom):
    text = long_text(loom, 3 * PREFILL_CHUNK)
    doc = loom.append(loom.root, text)
    count = len(loom.tree.nodes)
    stop_after_chunks(loom, 1)
    edited = "A" + text[1:]
    with pytest.raises(PrefillCancelled) as info:
        loom.edit(doc, edited, exact=True)
    node = info.value.node
    assert loom.text(node) == edited  # the whole edited branch is in the tree
    assert loom.text(doc) == text  # and the old one untouched
    assert len(loom.tree.nodes) > count
    loom.interrupt.clear()
    torch.testing.assert_close(
        loom.next_logits(node), reference_logits(loom, loom.tokens(node)), rtol=1e-4, atol=1e-4
    )


def test_generation_stops_in_its_prefill_with_no_child(loom):
    node = loom.append(loom.root, long_text(loom, 3 * PREFILL_CHUNK))
    loom.append(loom.root, "another path, so the buffer no longer holds the first")
    loom.runner.evict(node)  # the next generation has to read it all again
    stop_after_chunks(loom, 1)
    with pytest.raises(PrefillCancelled) as info:
        loom.generate(node, 4, temperature=0.0)
    assert info.value.node is node and not node.children
    loom.interrupt.clear()
    kids = loom.generate(node, 4, temperature=0.0)
    assert len(kids) == 1 and len(kids[0].tokens) == 4


def test_short_prefills_and_an_unset_interrupt_never_stop(loom):
    event = threading.Event()
    event.set()
    loom.interrupt = event
    node = loom.append(loom.root, "short enough for one chunk")  # no chunk boundary
    assert loom.text(node) == "short enough for one chunk"
    loom.interrupt = None
    loom.append(node, long_text(loom, 2 * PREFILL_CHUNK))  # no interrupt: reads it all
