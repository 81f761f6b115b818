"""Token healing: the first generated tokens must spell the typed text they replace.

Text typed up to the middle of a word (``The lighthou``) ends on a token boundary the
model rarely saw: it would go on after ``hou`` as if a word had just ended there.
guidance's token healing backs up the last token and lets the model choose the first
token again, among the tokens that start with the removed text (`` lighthouse`` after
``The``). Here the Loom backs up one or more typed tokens (``loom.healing``) and the
decoders ask this module, step by step, which tokens are allowed.

The rule at each step, per row, while ``remaining`` typed bytes are not yet spelled and
``budget`` tokens are left: a token whose bytes start with ``remaining`` (it spells it
whole, and may go on), or one whose bytes are a proper prefix of ``remaining`` when
the rest can still be spelled in the tokens left after it
(``TokenPrefixIndex.allowed``). The typed tokens themselves are always allowed, so a
row is never stuck; end-of-sequence and special tokens spell nothing and wait until
the text is spelled. Once a row's text is spelled the row samples freely.

Pure functions: :class:`HealState` is a value; ``constrain`` gives masked logits,
``after`` the state after the chosen tokens. The mask is applied before the whole
sampler chain, so the chain (and the recorded log-probabilities and alternatives,
``sample.chain.token_record_tensor``) sees the distribution *renormalised over the
allowed tokens*: a healed token's recorded log-probability is
``log_softmax(logits masked to the allowed tokens)``, and its alternatives are allowed
tokens only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from loomterm.engine.text_prefix import TokenPrefixIndex


@dataclass(frozen=True)
class Heal:
    """What a healed generation must spell first.

    Attributes:
        text: The typed bytes that were backed up (removed from the prompt).
        tokens: How many typed tokens were backed up.
        index: The vocabulary by the bytes of its tokens.
    """

    text: bytes
    tokens: int
    index: TokenPrefixIndex

    @property
    def typed(self) -> str:
        """The backed-up text (it always ends on a whole character)."""
        return self.text.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class HealState:
    """Per row, the typed bytes still to be spelled (``b""``: the row samples freely).

    ``start`` makes one for a generation (``heal`` None: no healing, never pending).
    """

    heal: Heal | None
    remaining: tuple[bytes, ...]

    @classmethod
    def start(cls, heal: Heal | None, rows: int) -> HealState:
        return cls(heal, (heal.text if heal is not None else b"",) * rows)

    @property
    def pending(self) -> bool:
        """Some row has typed text still to spell (cancelling waits for it)."""
        return any(self.remaining)

    def mask(self, budget: int, vocab: int, device: torch.device | str) -> torch.Tensor | None:
        """(B, vocab) bool, True where a token is allowed; None when no row is pending.
        ``budget``: tokens left to the generation, this one included."""
        if not self.pending:
            return None
        assert self.heal is not None
        rows = torch.ones(len(self.remaining), vocab, dtype=torch.bool)  # (B, V)
        made: dict[bytes, torch.Tensor] = {}
        for row, remaining in enumerate(self.remaining):
            if not remaining:
                continue
            if remaining not in made:
                allowed = torch.zeros(vocab, dtype=torch.bool)  # (V,)
                allowed[self.heal.index.allowed(remaining, budget)] = True
                made[remaining] = allowed
            rows[row] = made[remaining]
        return rows.to(device)

    def constrain(self, logits: torch.Tensor, budget: int) -> torch.Tensor:
        """``logits`` (B, V) with the tokens no pending row may take at -inf (the same
        tensor when no row is pending)."""
        mask = self.mask(budget, logits.shape[-1], logits.device)
        if mask is None:
            return logits
        return logits.masked_fill(~mask, -math.inf)  # (B, V)

    def after(self, picks: list[int]) -> HealState:
        """The state after each row took ``picks[row]``."""
        if not self.pending:
            return self
        assert self.heal is not None
        index = self.heal.index
        remaining = []
        for left, token in zip(self.remaining, picks, strict=True):
            spelled = index.bytes_of(token) if left else b""
            # A token the mask did not allow (none can be) ends the row's healing.
            proper = spelled and left.startswith(spelled)
            remaining.append(left[len(spelled) :] if proper else b"")
        return HealState(self.heal, tuple(remaining))

    def alternatives(self, rows: list[list[tuple[int, float]]]) -> list[list[tuple[int, float]]]:
        """Each row's recorded alternatives without the tokens the mask removed (their
        log-probability is -inf; fewer tokens than the list holds may be allowed)."""
        if self.heal is None:
            return rows
        return [[(t, lp) for t, lp in row if lp != -math.inf] for row in rows]
