"""Text and tokens: special tokens, partial UTF-8, edits as token splices."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import assert_matches_recompute


def test_special_tokens_are_tokenized_as_such(loom):
    tokens = loom.encode("<|im_start|>user\nhi<|im_end|>")
    assert tokens[0] == loom.runner.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert loom.runner.tokenizer.convert_tokens_to_ids("<|im_end|>") in tokens
    node = loom.append(loom.root, "<|im_start|>user\nhi<|im_end|>")
    # Special tokens are tokens, never text: the markers stay in the tree, the text
    # is what a writer sees, and a pane shows a marker by its written form.
    assert loom.tokens(node) == tokens
    assert loom.text(node) == "user\nhi"
    assert loom.token_pieces(tokens)[0] == ""
    assert loom.codec.label(tokens[0]) == "<|im_start|>"


def test_partial_utf8_tokens_round_trip_without_replacement_chars(loom):
    text = "Caf\u00e9 \u65e5\u672c\u8a9e \U0001f600!"
    tokens = loom.encode(text)
    pieces = loom.token_pieces(tokens)
    # Some token holds part of a character: its piece is empty, the char shows later.
    assert any(p == "" for p in pieces)
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    node = loom.append(loom.root, text)
    assert loom.text(node) == text
    assert loom.tokens(node) == tokens


def test_edit_round_trips_text_with_multibyte_characters(loom):
    node = loom.append(loom.root, "Caf\u00e9 \u65e5\u672c and more text here.")
    edited = loom.edit(node, "Caf\u00e9 \u65e5\u8a9e\u672c and more text here!", exact=True)
    assert loom.text(edited) == "Caf\u00e9 \u65e5\u8a9e\u672c and more text here!"
    assert_matches_recompute(loom, edited)


ALPHABET = "abc XYZ.,\n\u00e9\u65e5\U0001f600"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base=st.text(alphabet=ALPHABET, min_size=1, max_size=30),
    cut=st.integers(0, 30),
    remove=st.integers(0, 5),
    insert=st.text(alphabet=ALPHABET, max_size=6),
)
def test_random_edits_give_exactly_the_new_text(llama_loom, base, cut, remove, insert):
    loom = llama_loom
    node = loom.append(loom.root, base)
    cut = min(cut, len(base))
    new_text = base[:cut] + insert + base[cut + remove :]
    if new_text == base or not new_text:
        return
    edited = loom.edit(node, new_text, exact=True)
    assert loom.text(edited) == new_text
    assert loom.text(node) == base
