"""Tokens to text and back: per-token display pieces, streaming, and text diffs.

Byte-level tokenizers (GPT-2, Llama 3, Qwen, SmolLM) split multi-byte UTF-8
characters across tokens. A token's *piece* is the text it completes: a token holding
the first byte of a character has an empty piece, and the token with its last byte
shows the whole character. Joining the pieces gives the decoded text, with no
replacement characters for partial bytes.

Special tokens are tokens, never text. Start-of-text (``<bos>``, ``<s>``,
``<|begin_of_text|>``), end-of-sequence, padding and chat-template control tokens
(``<start_of_turn>``, ``<|im_end|>``) stand for no characters: :meth:`TokenText.token_bytes`,
the one place where a token becomes bytes, gives them none. So the document, exports,
search and every character offset are over the text a writer sees, while the tokens stay
in the tree and the KV. Their written form is :meth:`TokenText.label`, for the panes that
show one token on its own (alternatives, the token inspector).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomterm.tree import Node

PIECE_CONTEXT = 4  # tokens of left context that settle a token's text (UTF-8 <= 4 bytes)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's map from printable stand-in characters back to bytes."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class TokenText:
    """Turns token ids into bytes, pieces and text for one tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.added_ids = set(added.keys())
        self.special_ids = control_ids(tokenizer, added)
        self.mode = self._detect_mode()
        self._bytes = lru_cache(maxsize=None)(self._token_bytes)

    def _detect_mode(self) -> str:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        decoder = getattr(backend, "decoder", None) if backend is not None else None
        name = type(decoder).__name__ if decoder is not None else ""
        text = repr(decoder) if decoder is not None else ""
        if name == "ByteLevel" or "ByteLevel" in text:
            return "bytelevel"
        if "ByteFallback" in text or "Metaspace" in text or "\u2581" in text:
            return "sentencepiece"
        return "decode"

    def _token_bytes(self, token_id: int) -> bytes:
        if token_id in self.added_ids:
            return self.tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if self.mode == "bytelevel":
            table = BYTE_DECODER
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        elif self.mode == "sentencepiece":
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                return bytes([int(piece[3:5], 16)])
            return piece.replace("\u2581", " ").encode("utf-8")
        return self.tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of text one token stands for: none for a special token."""
        token_id = int(token_id)
        if token_id in self.special_ids:
            return b""
        return self._bytes(token_id)

    def label(self, token_id: int) -> str:
        """One token on its own, as a pane shows it: a special token's written form
        (``<eos>``), a token holding part of a character as its bytes (``\\xc3``)."""
        return self._bytes(int(token_id)).decode("utf-8", errors="backslashreplace")

    def pieces(self, tokens: list[int]) -> list[str]:
        """Display text per token; ``"".join(pieces(t)) == decode(t)``."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = [decoder.decode(self.token_bytes(t)) for t in tokens]
        tail = decoder.decode(b"", final=True)
        if tail and out:
            out[-1] += tail
        return out

    def complete_after(self, tokens: list[int]) -> list[bool]:
        """Per boundary ``i`` (0..len): True when the bytes of ``tokens[:i]`` end on a
        whole character, so text can be cut there."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        flags = [True]
        for t in tokens:
            decoder.decode(self.token_bytes(t))
            flags.append(decoder.getstate()[0] == b"")
        return flags

    def decode(self, tokens: list[int]) -> str:
        """The text of ``tokens`` (special tokens have none)."""
        return "".join(self.pieces(tokens))

    def written(self, tokens: list[int]) -> str:
        """``tokens`` with each special token in its written form: what a chat template
        renders, for matching templates against a path (never shown as the text)."""
        return b"".join(self._bytes(int(t)) for t in tokens).decode("utf-8", errors="replace")


BYTE_DECODER = _byte_decoder()


def control_ids(tokenizer: Any, added: dict | None = None) -> set[int]:
    """The ids of a Hugging Face tokenizer's special tokens: start and end of text,
    padding, and every added token marked special (chat-template markers). The unknown
    token is not among them (unless it doubles as one of those): it stands for text
    the vocabulary lacks."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or [])
    for token_id, token in (added or {}).items():
        if getattr(token, "special", False):
            ids.add(int(token_id))
    unk = getattr(tokenizer, "unk_token_id", None)
    roles = (getattr(tokenizer, f"{role}_token_id", None) for role in ("bos", "eos", "pad"))
    if isinstance(unk, int) and unk not in set(roles):  # SmolLM2's unk is its eos
        ids.discard(unk)
    return ids


class StreamDecoder:
    """Yields each new token's text as it arrives, holding back partial characters."""

    def __init__(self, text: TokenText) -> None:
        self.text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._decoder.decode(self.text.token_bytes(token_id))


class PieceMaker:
    """Display text per token, computed the same way for every node of a tree.

    A token's piece is the text it *completes*, given the tokens before it on its path
    (a token holding the first bytes of a character has an empty piece). That makes a
    node's text independent of what follows it, so the pieces along any path join to
    the path's text, in the file as on screen.
    """

    def __init__(self, codec: TokenText) -> None:
        self.codec = codec

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> PieceMaker:
        return cls(TokenText(tokenizer))

    def pieces(self, tokens: Sequence[int], context: Sequence[int] = ()) -> list[str]:
        """Pieces of ``tokens`` when ``context`` comes just before them."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for token in context:
            decoder.decode(self.codec.token_bytes(token))
        return [decoder.decode(self.codec.token_bytes(token)) for token in tokens]

    def node_pieces(self, node: Node, start: int = 0, end: int | None = None) -> list[str]:
        """Pieces of ``node.tokens[start:end]``, in the context of its path."""
        end = len(node.tokens) if end is None else end
        return self.pieces(node.tokens[start:end], tokens_before(node, start, PIECE_CONTEXT))

    def piece(self, token: int) -> str:
        """One token on its own (for alternatives): a special token's written form."""
        if int(token) in self.codec.special_ids:
            return self.codec.label(token)
        return self.codec.decode([int(token)])


def tokens_before(node: Node, start: int, count: int) -> list[int]:
    """Up to ``count`` tokens just before position ``start`` of ``node``, on its path."""
    out = list(node.tokens[max(0, start - count) : start])
    above = node.parent
    while len(out) < count and above is not None:
        out = above.tokens[-(count - len(out)) :] + out if above.tokens else out
        above = above.parent
    return out


def common_prefix(a: list, b: list) -> int:
    """Length of the longest common prefix of two sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_suffix(a: list, b: list, limit: int) -> int:
    """Length of the longest common suffix, at most ``limit``."""
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[len(a) - 1 - i] == b[len(b) - 1 - i]:
        i += 1
    return i
