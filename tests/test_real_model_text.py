"""Special tokens are tokens, never text, on real models and both local backends.

SmolLM2 (byte-level BPE, adds no start-of-text token) and Gemma 3 270M (SentencePiece
with byte fallback, adds ``<bos>``), each on the torch runner and the llama.cpp runner:
typed text, a generation, edits at the start, middle and end, going back (undo) and a
txt export all read exactly the writer's characters; ``<bos>`` stays first in the tree
and the KV; every character offset maps to the token it is in; every node's next-token
logits equal a fresh evaluation of its path.

Gemma 3 comes from ``models.shipped`` into the test cache once (its torch conversion
takes about a minute, once per cache).
"""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from loomterm.tui import ops
from tests.helpers import assert_matches_recompute
from tests.llamacpp.conftest import (  # noqa: F401 - fixtures used by name
    EXACT_KL,
    THREADS,
    Fresh,
    binding,
    default_gguf,
    kl,
    llama_build,
)

pytestmark = [pytest.mark.default_model, pytest.mark.gemma]

STORY = "Once upon a time there was a girl who was eleven years old. She lived by the sea"
CASES = [
    ("smollm2", "torch"),
    ("smollm2", "llama.cpp"),
    ("gemma", "torch"),
    ("gemma", "llama.cpp"),
]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def case(request):
    """``(name, backend, loom, check)``: ``check(node)`` asserts the node's next-token
    logits equal a fresh evaluation of its path."""
    name, backend = request.param
    if backend == "torch":
        folder = request.getfixturevalue("gemma_dir") if name == "gemma" else None
        loom = Loom.load(str(folder) if folder else None, device="cpu", dtype="float32")

        def check(node) -> None:
            assert_matches_recompute(loom, node)

        yield name, backend, loom, check
        return
    request.getfixturevalue("binding")
    gguf = request.getfixturevalue("gemma_gguf" if name == "gemma" else "default_gguf")
    loom = Loom.load(model=str(gguf), backend="llama.cpp", n_ctx=1024, threads=THREADS)
    fresh = Fresh(gguf)

    def check(node) -> None:
        value = kl(fresh.logits(node.path_tokens()), loom.next_logits(node))
        assert value < EXACT_KL, f"KL {value:.4f} to a fresh evaluation"

    yield name, backend, loom, check
    loom.runner.close()


def offsets_are_exact(loom: Loom, node) -> None:
    """Every char of the path's text maps to the token holding it, and back."""
    text = loom.text(node)
    tokens = loom.tokens(node)
    pieces = loom.token_pieces(tokens)
    assert "".join(pieces) == text
    for char in range(0, len(text) + 1, 7):
        position, partial = ops.split_at_char(loom, node, char)
        assert "".join(pieces[:position]) + partial == text[:char]
    # The caret at the end (where ctrl+g generates from) keeps every token.
    assert ops.split_at_char(loom, node, len(text)) == (len(tokens), "")


def test_text_edits_and_export_hold_only_the_writers_characters(case, tmp_path):
    name, backend, loom, check = case
    special = loom.codec.special_ids
    typed = loom.append(loom.root, STORY)
    assert loom.text(typed) == STORY
    first = typed.tokens[0]
    if name == "gemma":  # the tokenizer's <bos>: first in the tree, no text
        assert first in special and loom.codec.label(first) == "<bos>"
        assert loom.codec.token_bytes(first) == b""
    else:
        assert first not in special
    check(typed)
    offsets_are_exact(loom, typed)

    (kid,) = loom.generate(typed, 12, temperature=0)
    generated = loom.text(kid)
    assert generated.startswith(STORY) and "<bos>" not in generated
    check(kid)
    offsets_are_exact(loom, kid)

    # An edit at the start lands at char 0, after <bos>, which stays first.
    start = loom.edit(kid, "Long ago. " + generated, exact=True)
    assert loom.text(start) == "Long ago. " + generated
    assert (start.path_tokens()[0] == first) == (name == "gemma")
    assert sum(t in special for t in start.path_tokens()) == sum(
        t in special for t in kid.path_tokens()
    )
    check(start)
    offsets_are_exact(loom, start)

    middle_text = loom.text(start).replace("eleven years", "eleven long years")
    middle = loom.edit(start, middle_text, exact=True)
    assert loom.text(middle) == middle_text
    check(middle)

    end_text = middle_text + " The end."
    end = loom.edit(middle, end_text, exact=True)
    assert loom.text(end) == end_text
    assert (end.path_tokens()[0] == first) == (name == "gemma")
    check(end)
    offsets_are_exact(loom, end)

    # Undo goes back to the earlier nodes: their text is as it was.
    for node, text in ((typed, STORY), (kid, generated), (start, "Long ago. " + generated)):
        loom.cursor = node
        assert loom.text(node) == text
    loom.cursor = end
    written = ops.export_session(loom, str(tmp_path / "story.txt"), "txt")
    exported = open(written, encoding="utf-8").read()
    assert exported.rstrip("\n") == end_text


def test_a_special_token_in_the_text_keeps_its_place_through_edits(case):
    """A chat marker the model or a template put in the middle keeps its place: an
    insertion where it sits goes before it, one after its text after it."""
    _, _, loom, check = case
    eos = min(loom.eos_ids)
    head = loom.append(loom.root, "Hello there")
    marked = loom.append_tokens(head, [eos])
    tail = loom.append(marked, " and goodbye")
    text = loom.text(tail)
    assert text == "Hello there and goodbye"
    inserted = loom.edit(tail, "Hello there, friend and goodbye", exact=True)
    tokens = inserted.path_tokens()
    at = tokens.index(eos)
    assert loom.decode(tokens[:at]) == "Hello there, friend"
    assert loom.decode(tokens[at + 1 :]) == " and goodbye"
    check(inserted)
    removed = loom.edit(inserted, "Hello goodbye", exact=True)
    assert loom.text(removed) == "Hello goodbye"
    assert eos not in removed.path_tokens()[1:]  # deleted with the text around it
    check(removed)
