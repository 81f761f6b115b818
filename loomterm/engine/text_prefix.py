"""Tokens by the bytes they start with: the vocabulary as a sorted list of token texts.

Token healing (``sample.healing``) asks two questions of a tokenizer, many times per
generation, about a short run of typed bytes ``s``:

- which tokens' bytes start with ``s`` (they cover it whole, and may go on), and
- which tokens' bytes are a proper prefix of ``s`` (they cover its start; the rest is
  left for the next token).

guidance answers the first with a byte trie of the vocabulary
(``guidance._cpp.ByteTrie``); a sorted list and ``bisect`` give the same answer in a few
lines: the tokens starting with ``s`` are one contiguous run of the sorted list. The
second is one dictionary probe per proper prefix of ``s`` (a handful of bytes).

Special tokens stand for no text (``TokenText.token_bytes``) and are left out, so
they are never a way to spell typed text.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomterm.engine.text import TokenText
    from loomterm.tree import Node


class TokenPrefixIndex:
    """The non-empty token texts of one vocabulary, sorted by their bytes.

    Attributes:
        vocab_size: Token ids run from 0 to ``vocab_size - 1``.
    """

    def __init__(self, token_bytes: list[bytes]) -> None:
        self.vocab_size = len(token_bytes)
        pairs = sorted((text, token) for token, text in enumerate(token_bytes) if text)
        self._texts = [text for text, _ in pairs]
        self._ids = [token for _, token in pairs]
        self._token_bytes = token_bytes
        self._by_text: dict[bytes, list[int]] = {}
        for text, token in pairs:
            self._by_text.setdefault(text, []).append(token)
        self.cover_steps = lru_cache(maxsize=4096)(self._cover_steps)

    @classmethod
    def of(cls, codec: TokenText, vocab_size: int) -> TokenPrefixIndex:
        """The index of ``codec``'s vocabulary, built once per codec (``prefix_index``)."""
        return cls([codec.token_bytes(token) for token in range(vocab_size)])

    def bytes_of(self, token: int) -> bytes:
        """The bytes ``token`` stands for (none for a special token)."""
        return self._token_bytes[token] if 0 <= token < self.vocab_size else b""

    def starting_with(self, prefix: bytes) -> list[int]:
        """Ids of the tokens whose bytes start with ``prefix`` (``prefix`` itself too)."""
        lo = bisect.bisect_left(self._texts, prefix)
        hi = lo
        while hi < len(self._texts) and self._texts[hi].startswith(prefix):
            hi += 1
        return self._ids[lo:hi]

    def extends(self, prefix: bytes) -> bool:
        """Whether some token's bytes start with ``prefix`` and go on past it."""
        lo = bisect.bisect_right(self._texts, prefix)
        return lo < len(self._texts) and self._texts[lo].startswith(prefix)

    def prefixes_of(self, text: bytes) -> list[tuple[int, int]]:
        """``(token, length)`` for the tokens whose bytes are a proper prefix of ``text``,
        leaving out a cut between a space and the word after it: tokenizers attach the
        space to the word (`` light``), so a lone space before a word is a spelling the
        model hardly ever saw, and its probability is not the word's."""
        found = []
        for length in range(1, len(text)):
            if text[length - 1 : length].isspace() and not text[length : length + 1].isspace():
                continue
            for token in self._by_text.get(text[:length], ()):
                found.append((token, length))
        return found

    def _cover_steps(self, text: bytes) -> int:
        """The fewest tokens whose joined bytes start with ``text`` (0 for ``b""``);
        a large number when no tokens spell it."""
        if not text:
            return 0
        if self.starting_with(text):
            return 1
        best = NO_COVER
        for _, length in self.prefixes_of(text):
            best = min(best, 1 + self.cover_steps(text[length:]))
        return best

    def allowed(self, remaining: bytes, budget: int) -> list[int]:
        """The tokens that may come next while ``remaining`` typed bytes are still to
        be spelled and at most ``budget`` tokens are left: a token that covers them
        whole, or one that covers their start when the rest can still be covered in
        the tokens left after it."""
        allowed = self.starting_with(remaining)
        for token, length in self.prefixes_of(remaining):
            if 1 + self.cover_steps(remaining[length:]) <= budget:
                allowed.append(token)
        return allowed


NO_COVER = 1 << 30

_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prefix_index(codec: TokenText, vocab_size: int) -> TokenPrefixIndex:
    """``codec``'s :class:`TokenPrefixIndex`, built on first use and kept while the
    codec lives (one per tokenizer)."""
    index = _INDEXES.get(codec)
    if index is None or index.vocab_size != vocab_size:
        index = TokenPrefixIndex.of(codec, vocab_size)
        _INDEXES[codec] = index
    return index


def healed_count(token_bytes: list[bytes], typed: bytes) -> int:
    """How many of a child's first tokens (their bytes ``token_bytes``) spell ``typed``
    (the text its healing spelled again, ``meta["healed"]``): the healed tokens, 0 when
    they do not spell it."""
    spelled = b""
    for count, piece in enumerate(token_bytes, start=1):
        spelled += piece
        if len(spelled) >= len(typed):
            return count if spelled.startswith(typed) else 0
    return 0


class AfterTyped:
    """An ``on_token`` callback that passes on only the text after what the writer
    typed. A healed child's first pieces spell the typed text again
    (``meta["healed"]``); a consumer that already printed the prompt skips them."""

    def __init__(self, on_token: Callable[[Node, int, str], None]) -> None:
        self.on_token = on_token
        self.left: dict[int, int] = {}  # per child: characters still to skip

    def __call__(self, node: Node, token: int, piece: str) -> None:
        healed = node.meta.get("healed")
        left = self.left.setdefault(node.id, len(healed) if isinstance(healed, str) else 0)
        cut = min(left, len(piece))
        self.left[node.id] = left - cut
        self.on_token(node, token, piece[cut:])
