"""DRY's sequence breakers as one tokenizer's ids, resolved once per breaker list: a
runner keeps one :class:`BreakerTable` (resolving scans the whole vocabulary).
"""

from __future__ import annotations

from collections.abc import Callable

from loomterm.engine.sample.chain import DryBreakers, SamplingParams, resolve_dry_breakers
from loomterm.engine.text import TokenText


class BreakerTable:
    """The breakers of each list asked for so far, for the vocabulary of ``codec``;
    ``encode`` tokenizes a breaker's text."""

    def __init__(self, codec: TokenText, vocab_size: int, encode: Callable[[str], list[int]]):
        self.codec = codec
        self.vocab_size = vocab_size
        self.encode = encode
        self._resolved: dict[tuple[str, ...], DryBreakers] = {}
        self._pieces: list[str] | None = None  # every token's text

    def for_params(self, params: SamplingParams) -> DryBreakers | None:
        """The breakers ``params`` names (None when DRY is off)."""
        if not params.dry_active:
            return None
        key = params.dry_sequence_breakers
        if key not in self._resolved:
            if self._pieces is None:
                self._pieces = [self.codec.decode([i]) for i in range(self.vocab_size)]
            self._resolved[key] = resolve_dry_breakers(key, self._pieces, self.encode)
        return self._resolved[key]
