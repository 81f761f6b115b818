"""TokenText without a model: how each tokenizer family's tokens become bytes and
pieces, streaming, and the prefix/suffix helpers behind edits."""

from __future__ import annotations

import pytest

from loomterm.engine.text import (
    BYTE_DECODER,
    StreamDecoder,
    TokenText,
    common_prefix,
    common_suffix,
)


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from tests.tiny_models import build_tokenizer

    return build_tokenizer()


# -- fakes: just the tokenizer surface TokenText reads ---------------------------------------
class Decoder:
    """A backend decoder with a chosen class name and repr."""

    def __init__(self, name: str, text: str) -> None:
        self.__class__ = type(name, (Decoder,), {})
        self.text = text

    def __repr__(self) -> str:
        return self.text


class Backend:
    def __init__(self, decoder) -> None:
        self.decoder = decoder


class FakeTokenizer:
    """Vocabulary pieces by id; ``decode`` is a plain join with its own marker, so a test
    sees which path produced the bytes."""

    def __init__(self, pieces, decoder=None, special=(), added=(), backend=True) -> None:
        self.vocab = dict(enumerate(pieces))
        self.all_special_ids = special  # None or empty in some tokenizers
        self.added_tokens_decoder = dict(added) if added is not None else None
        if backend:
            self.backend_tokenizer = Backend(decoder)
        self.decoded: list[tuple[list[int], bool]] = []

    def convert_ids_to_tokens(self, token_id):
        return self.vocab.get(token_id)

    def decode(self, ids, skip_special_tokens=True):
        self.decoded.append((list(ids), skip_special_tokens))
        return "<" + "".join(self.vocab[i] for i in ids) + ">"


def fake(pieces, decoder=None, **kwargs) -> TokenText:
    return TokenText(FakeTokenizer(pieces, decoder, **kwargs))


# -- GPT-2's byte table ------------------------------------------------------------------------
def test_the_byte_table_is_gpt2s():
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    from loomterm.engine.text import _byte_decoder

    reference = {char: byte for byte, char in bytes_to_unicode().items()}
    assert BYTE_DECODER == reference
    assert _byte_decoder() == reference  # the builder itself (the table is built at import)
    assert len(BYTE_DECODER) == 256 and sorted(BYTE_DECODER.values()) == list(range(256))
    assert BYTE_DECODER["\u0120"] == 32 and BYTE_DECODER["\u010a"] == 10  # "Ġ", "Ċ"
    assert BYTE_DECODER["!"] == 33 and BYTE_DECODER["\u00ff"] == 255
    assert BYTE_DECODER["\u0100"] == 0 and BYTE_DECODER["\u0143"] == 173  # the soft hyphen


# -- which kind of tokenizer ------------------------------------------------------------------
@pytest.mark.parametrize(
    "decoder, mode",
    [
        (Decoder("ByteLevel", "ByteLevel(add_prefix_space=True)"), "bytelevel"),
        (Decoder("ByteLevel", "plain"), "bytelevel"),  # the class name is enough
        (Decoder("Sequence", "Sequence(decoders=[ByteLevel()])"), "bytelevel"),
        (Decoder("Sequence", "Sequence(decoders=[ByteFallback(), Fuse()])"), "sentencepiece"),
        (Decoder("Metaspace", 'Metaspace(replacement="_")'), "sentencepiece"),
        (Decoder("Replace", 'Replace(pattern="\u2581", content=" ")'), "sentencepiece"),
        (Decoder("WordPiece", 'WordPiece(prefix="##")'), "decode"),
        (None, "decode"),
    ],
)
def test_the_mode_follows_the_backend_decoder(decoder, mode):
    assert fake(["a"], decoder).mode == mode


def test_a_tokenizer_without_a_backend_decodes():
    assert fake(["a"], backend=False).mode == "decode"
    odd = FakeTokenizer(["a"])
    odd.backend_tokenizer = object()  # a backend with no decoder attribute at all
    assert TokenText(odd).mode == "decode"


def test_the_real_byte_level_tokenizer(tiny_tokenizer):
    text = TokenText(tiny_tokenizer)
    assert text.mode == "bytelevel"
    specials = set(tiny_tokenizer.all_special_ids)
    assert specials and text.special_ids == specials
    assert text.added_ids == set(tiny_tokenizer.added_tokens_decoder)
    sample = "Caf\u00e9 \U0001f600 x\n"
    ids = tiny_tokenizer.encode(sample, add_special_tokens=False)
    assert b"".join(text.token_bytes(t) for t in ids) == sample.encode("utf-8")
    assert text.decode(ids) == sample == tiny_tokenizer.decode(ids)
    im_end = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert text.token_bytes(im_end) == b""  # a special token stands for no text
    assert text.label(im_end) == "<|im_end|>"


# -- a token's bytes ----------------------------------------------------------------------------
def test_byte_level_pieces_map_through_the_table():
    text = fake(["\u0120hi", "\u00c3", "\u00a9", "\u010a"], Decoder("ByteLevel", ""))
    assert [text.token_bytes(i) for i in range(4)] == [b" hi", b"\xc3", b"\xa9", b"\n"]
    assert text.tokenizer.decoded == []  # no decode call needed


def test_byte_level_pieces_outside_the_table_are_decoded():
    text = fake(["ok\u4e00"], Decoder("ByteLevel", ""))  # a character the table lacks
    assert text.token_bytes(0) == "<ok\u4e00>".encode()
    assert text.tokenizer.decoded == [([0], False)]


def test_sentencepiece_pieces_spaces_and_byte_fallback():
    pieces = ["\u2581hello", "<0xE6>", "<0x97>", "<0xA5>", "x\u2581y", "<0x4>", "<0x41]", "(0x41>"]
    text = fake(pieces, Decoder("Metaspace", "Metaspace"))
    got = [text.token_bytes(i) for i in range(5)]
    assert got == [b" hello", b"\xe6", b"\x97", b"\xa5", b"x y"]
    assert text.decode([0, 1, 2, 3]) == " hello\u65e5"
    # Not byte tokens: the wrong length, or not quite the "<0xNN>" form.
    assert [text.token_bytes(i) for i in (5, 6, 7)] == [b"<0x4>", b"<0x41]", b"(0x41>"]
    assert text.tokenizer.decoded == []


def test_other_tokenizers_decode_one_token_at_a_time():
    text = fake(["ab", "c"], Decoder("WordPiece", "WordPiece"))
    assert text.token_bytes(1) == b"<c>"
    assert text.tokenizer.decoded == [([1], False)]  # special tokens shown as themselves


def test_added_tokens_are_decoded_whatever_the_mode():
    text = fake(["\u0120a", "<tool>"], Decoder("ByteLevel", ""), special=[1], added={1: "t"})
    assert text.special_ids == {1} and text.added_ids == {1}
    assert text.token_bytes(1) == b""  # special: a token, never text
    assert text.label(1) == "<<tool>>"  # its written form, decoded with specials shown
    assert text.tokenizer.decoded == [([1], False)]
    plain = fake(["\u0120a", "<tool>"], Decoder("ByteLevel", ""), special=[], added={1: "t"})
    assert plain.token_bytes(1) == b"<<tool>>"  # an added token not special is text
    assert fake(["a"], special=None, added=None).added_ids == set()
    assert fake(["a"], special=None).special_ids == set()
    bare = FakeTokenizer(["a"])
    del bare.added_tokens_decoder
    assert TokenText(bare).added_ids == set()


def test_an_unknown_id_has_no_bytes():
    assert fake(["a"], Decoder("ByteLevel", "")).token_bytes(7) == b""


def test_token_bytes_are_cached_and_take_any_integer():
    text = fake(["a", "b"], Decoder("WordPiece", ""))
    assert text.token_bytes(1) == b"<b>"
    assert text.token_bytes(1) == b"<b>"
    assert len(text.tokenizer.decoded) == 1  # decoded once

    class Id:
        def __int__(self) -> int:
            return 1

    assert text.token_bytes(Id()) == b"<b>" and len(text.tokenizer.decoded) == 1


# -- pieces ------------------------------------------------------------------------------------
BYTES = Decoder("ByteLevel", "")
# "é" is C3 A9; "😀" is F0 9F 98 80 (in the table's stand-in characters).
E1, E2 = "\u00c3", "\u00a9"  # 0xC3, 0xA9
F0, F1, F2, F3 = "\u00f0", "\u0141", "\u013a", "\u0122"


def test_pieces_hold_whole_characters_at_the_token_that_completes_them():
    text = fake(["a", E1, E2, F0, F1, F2, F3, "b"], BYTES)
    assert text.pieces(list(range(8))) == ["a", "", "\u00e9", "", "", "", "\U0001f600", "b"]
    assert text.decode(list(range(8))) == "a\u00e9\U0001f600b"
    assert text.pieces([]) == [] and text.decode([]) == ""


def test_pieces_show_a_character_cut_at_the_end():
    text = fake(["a", E1, F0, F1], BYTES)
    assert text.pieces([0, 1]) == ["a", "\ufffd"]  # the partial byte shows, at the end
    assert text.pieces([0, 2, 3]) == ["a", "", "\ufffd"]
    assert text.pieces([1]) == ["\ufffd"]
    assert text.pieces([0]) == ["a"]
    text = fake(["b" + E1], BYTES)  # one token: a whole character, then a partial one
    assert text.pieces([0]) == ["b\ufffd"]


def test_complete_after_marks_the_boundaries_between_whole_characters():
    text = fake(["a", E1, E2, F0, F1, F2, F3], BYTES)
    assert text.complete_after([]) == [True]
    assert text.complete_after([0, 1, 2]) == [True, True, False, True]
    assert text.complete_after([3, 4, 5, 6, 0]) == [True, False, False, False, True, True]
    # Invalid bytes (a stray continuation byte) are replaced, not raised.
    assert text.complete_after([2, 0, 1]) == [True, True, True, False]


def test_stream_decoder_holds_back_partial_characters():
    text = fake(["a", E1, E2, F0, F1, F2, F3], BYTES)
    stream = StreamDecoder(text)
    assert [stream.push(t) for t in [0, 1, 2, 3, 4, 5, 6, 0]] == [
        "a",
        "",
        "\u00e9",
        "",
        "",
        "",
        "\U0001f600",
        "a",
    ]
    assert StreamDecoder(text).push(2) == "\ufffd"  # a stray continuation byte


# -- edits' helpers ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "a, b, n",
    [
        ([], [], 0),
        ([1], [], 0),
        ([1, 2, 3], [1, 2, 4], 2),
        ([1, 2], [1, 2, 3], 2),
        ([1, 2, 3], [1, 2, 3], 3),
        ([9, 2], [1, 2], 0),
    ],
)
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n == common_prefix(b, a)


@pytest.mark.parametrize(
    "a, b, limit, n",
    [
        ([], [], 5, 0),
        ([1, 2, 3], [0, 2, 3], 5, 2),
        ([1, 2, 3], [2, 3], 5, 2),
        ([1, 2, 3], [1, 2, 3], 5, 3),
        ([1, 2, 3], [1, 2, 3], 2, 2),  # at most the limit
        ([1, 2, 3], [1, 2, 3], 0, 0),
        ([1, 2, 3], [1, 2, 4], 5, 0),
        ([5, 1, 2], [1, 2], 1, 1),
        ([2, 2], [2, 2, 2], 5, 2),  # no further than the shorter one
    ],
)
def test_common_suffix(a, b, limit, n):
    assert common_suffix(a, b, limit) == n == common_suffix(b, a, limit)
