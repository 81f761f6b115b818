"""Special tokens are tokens, never text, for tokenizers that add a start-of-text token.

Two small real tokenizers are built here with the ``tokenizers`` library, no model
download needed: a SentencePiece-like BPE with byte fallback that adds ``<bos>`` (as
Gemma's and Llama 2's do) and a byte-level BPE that adds ``<|begin_of_text|>`` (as
Llama 3's does), both with chat-template control tokens. Their text, character offsets
and edits (``plan_edit``, ``respell``) are checked over many edits, and a tiny seeded
Llama on each runs the engine's edits against a full recompute.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomterm.engine.loom.edits import plan_edit
from loomterm.engine.text import TokenText
from tests.helpers import assert_matches_recompute, make_loom
from tests.tiny_models import CORPUS

SP_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
BL_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|eot_id|>"]


def sentencepiece_tokenizer():
    """BPE over "▁"-marked words with byte fallback (``<0xE6>``), adding ``<bos>``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    probe = Tokenizer(models.BPE(unk_token="<unk>"))
    probe.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SP_SPECIAL, show_progress=False)
    probe.train_from_iterator([line for line in CORPUS if line.isascii()] * 4, trainer=trainer)
    vocab = dict(probe.get_vocab())
    for byte in range(256):  # the byte tokens a character outside the vocabulary falls to
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    trained = json.loads(probe.to_str())["model"]["merges"]
    merges = [
        tuple(pair.split(" ", 1)) if isinstance(pair, str) else tuple(pair) for pair in trained
    ]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tok.add_special_tokens(SP_SPECIAL)
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        pad_token="<pad>",
    )


def byte_level_tokenizer():
    """Byte-level BPE adding ``<|begin_of_text|>``, with Llama 3's header markers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=BL_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
    )


BUILDERS = {"sentencepiece": sentencepiece_tokenizer, "bytelevel": byte_level_tokenizer}
MARKERS = {"sentencepiece": SP_SPECIAL[4:], "bytelevel": BL_SPECIAL[2:]}  # chat turns
TOKENIZERS: dict[str, object] = {}


def tokenizer_of(kind: str):
    if kind not in TOKENIZERS:
        TOKENIZERS[kind] = BUILDERS[kind]()
    return TOKENIZERS[kind]


@pytest.fixture(params=sorted(BUILDERS))
def kind(request) -> str:
    return request.param


def encoder(tokenizer):
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_the_start_token_is_a_token_with_no_text(kind):
    tokenizer = tokenizer_of(kind)
    codec = TokenText(tokenizer)
    assert codec.mode == kind
    text = "Once upon a time, caf\u00e9 \u65e5\u672c \U0001f600."
    tokens = list(tokenizer(text)["input_ids"])
    assert tokens[0] == tokenizer.bos_token_id  # the tokenizer adds it
    assert tokenizer.decode(tokens).startswith(tokenizer.bos_token)  # as text, before
    pieces = codec.pieces(tokens)
    assert pieces[0] == "" and "".join(pieces) == codec.decode(tokens) == text
    assert codec.label(tokens[0]) == tokenizer.bos_token
    for marker in MARKERS[kind]:
        token = tokenizer.convert_tokens_to_ids(marker)
        assert token in codec.special_ids and codec.token_bytes(token) == b""
    if kind == "sentencepiece":  # a character outside the vocabulary went to bytes
        assert any(tokenizer.convert_ids_to_tokens(t).startswith("<0x") for t in tokens)


def apply(tokens: list[int], plan: tuple[int, int, list[int]]) -> list[int]:
    start, end, inserted = plan
    return tokens[:start] + inserted + tokens[end:]


def test_an_edit_at_the_start_lands_after_the_start_token(kind):
    tokenizer = tokenizer_of(kind)
    codec, encode = TokenText(tokenizer), encoder(tokenizer)
    tokens = list(tokenizer("Once upon a time")["input_ids"])
    new = apply(tokens, plan_edit(codec, encode, tokens, "Long ago. Once upon a time"))
    assert new[0] == tokenizer.bos_token_id and new.count(tokenizer.bos_token_id) == 1
    assert codec.decode(new) == "Long ago. Once upon a time"
    # The writer deletes the first word: the start token stays.
    new = apply(tokens, plan_edit(codec, encode, tokens, " upon a time"))
    assert new[0] == tokenizer.bos_token_id and codec.decode(new) == " upon a time"


TEXT = st.text(alphabet="ab \n.\u00e9\u65e5\U0001f600", max_size=12)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(BUILDERS)),
    parts=st.lists(TEXT, min_size=1, max_size=4),
    marker=st.integers(0, 2),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    typed=TEXT,
)
def test_every_edit_keeps_the_text_and_the_special_tokens(kind, parts, marker, cut, typed):
    """Text with start and turn markers between parts, changed anywhere: the new tokens
    read the new text; ``<bos>`` stays first; a marker goes only with deleted text."""
    tokenizer = tokenizer_of(kind)
    codec, encode = TokenText(tokenizer), encoder(tokenizer)
    markers = [tokenizer.convert_tokens_to_ids(m) for m in MARKERS[kind]]
    tokens = [tokenizer.bos_token_id]
    for index, part in enumerate(parts):
        tokens += encode(part)
        if index < len(parts) - 1:
            tokens.append(markers[(index + marker) % len(markers)])
    old = codec.decode(tokens)
    a, b = sorted(int(x * len(old)) for x in cut)
    new_text = old[:a] + typed + old[b:]
    if new_text == old:
        return
    try:
        new = apply(tokens, plan_edit(codec, encode, tokens, new_text))
    except Exception as exc:  # only "the tokens are unchanged" may stop it
        assert "unchanged" in str(exc)
        return
    assert codec.decode(new) == new_text
    assert new[0] == tokenizer.bos_token_id and new.count(tokenizer.bos_token_id) == 1
    kept = [t for t in new if t in markers]
    before = [t for t in tokens if t in markers]
    assert len(kept) <= len(before)
    if b == a:  # an insertion deletes nothing: every marker stays
        assert kept == before


# -- the engine on a tiny Llama with each tokenizer ------------------------------------
def build_bos_llama(folder: Path, kind: str) -> Path:
    """A tiny seeded Llama on the ``kind`` tokenizer, saved as a model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer_of(kind)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bos_llama_dirs(tmp_path_factory) -> dict[str, Path]:
    return {
        kind: build_bos_llama(tmp_path_factory.mktemp(f"bos-{kind}"), kind) for kind in BUILDERS
    }


def test_engine_edits_and_retypes_keep_the_start_token(kind, bos_llama_dirs):
    loom = make_loom(bos_llama_dirs[kind])
    bos = loom.runner.tokenizer.bos_token_id
    typed = loom.append(loom.root, "Once upon a time")
    assert typed.tokens[0] == bos and loom.text(typed) == "Once upon a time"
    # Typing goes on in the writer's own node: it is rewritten in place, <bos> kept.
    again = loom.retype(typed, "Once upon a time there", exact=True)
    assert again is typed and typed.tokens[0] == bos
    assert loom.text(typed) == "Once upon a time there"
    retyped = loom.retype(typed, "Long ago, once upon a time there", exact=True)
    assert retyped is typed and typed.tokens[0] == bos and typed.tokens.count(bos) == 1
    assert loom.text(typed) == "Long ago, once upon a time there"
    assert_matches_recompute(loom, typed)
    (kid,) = loom.generate(typed, 6, temperature=0)
    text = loom.text(kid)
    edited = loom.edit(kid, "X" + text, exact=True)
    assert loom.text(edited) == "X" + text and edited.path_tokens()[0] == bos
    assert edited.path_tokens().count(bos) == 1
    assert_matches_recompute(loom, edited)
    fast = loom.edit(kid, text[:5] + "Y" + text[5:])
    assert loom.text(fast) == text[:5] + "Y" + text[5:]
    loom.refresh(fast)
    assert_matches_recompute(loom, fast)
