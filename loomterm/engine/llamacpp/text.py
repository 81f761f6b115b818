"""Token text from llama.cpp's own vocabulary (``llama_token_to_piece``)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from loomterm.engine.text import TokenText

if TYPE_CHECKING:
    from loomterm.engine.llamacpp.context import LlamaContext


class LlamaTokenText(TokenText):
    """Bytes, pieces and text of token ids, read from the GGUF file's vocabulary.

    Control tokens (start and end of sequence, chat markers) are ``special_ids``: they
    stand for no text (``TokenText.token_bytes``), as with the torch runner; their
    written form is ``label``."""

    def __init__(self, context: LlamaContext) -> None:
        self.tokenizer = None
        self.mode = "llama.cpp"
        lib, vocab = context.lib, context.vocab
        control = {
            token
            for token in range(context.vocab_size)
            if lib.llama_vocab_is_control(vocab, token) or lib.llama_vocab_is_eog(vocab, token)
        }
        self.special_ids: set[int] = control
        self.added_ids: set[int] = set()
        self._bytes = lru_cache(maxsize=None)(context.token_bytes)
