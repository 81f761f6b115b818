"""A row's random stream drawn ahead: the draws of the coming tokens, known early.

``sample.chain.draw`` picks a token with ``torch.multinomial(p, 1, generator=g)``,
which on the CPU is an exponential race: ``argmax(p / E)`` with ``E`` one ``Exp(1)``
variate per vocabulary entry drawn from ``g`` (PyTorch's ``multinomial`` fast path for
one sample, ``aten/src/ATen/native/Distributions.cpp``). ``E`` does not depend on ``p``.
So the races of the next few tokens can be drawn before their distributions are known,
in the order plain decoding draws them (XTC's coin, when XTC is on, then the race), and
spent one per token: each token is then ``argmax(p / E)`` exactly as ``multinomial``
would have drawn it, seed for seed (``tests/engine/test_draw_ahead.py`` pins this).

Drafted decoding (``decode.drafted``) reads the races ahead to *propose* drafts: the
token a coming draw would pick if the model's distribution were a draft's estimate of
it, ``argmax(q / E)``, is the likeliest to be the one really drawn, ``argmax(p / E)``
(the two agree with probability about ``1 - TV(p, q)``, against ``p(x)`` for the most
likely draft ``x`` drawn independently). The rule that accepts a draft is unchanged --
a draft is kept when it is the token drawn -- so what is emitted is plain decoding's
text for the seed, whatever was proposed.
"""

from __future__ import annotations

from collections import deque

import torch


class DrawAhead:
    """The coming draws of one row: ``(coin, race)`` per token, drawn from
    ``generator`` (None: PyTorch's global generator) in plain decoding's order.

    ``vocab``: the logits' width; ``xtc``: whether each token also costs XTC's coin.
    """

    def __init__(self, generator: torch.Generator | None, vocab: int, xtc: bool) -> None:
        self.generator, self.vocab, self.xtc = generator, vocab, xtc
        self.ahead: deque[tuple[torch.Tensor | None, torch.Tensor]] = deque()

    def _draw(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        g = self.generator
        coin = None
        if self.xtc:
            coin = torch.rand(1) if g is None else torch.rand(1, generator=g)
        race = torch.empty(self.vocab, dtype=torch.float32)
        race.exponential_(1.0, generator=g)
        return coin, race

    def race(self, j: int) -> torch.Tensor:
        """(V,) exponentials of the ``j``-th coming token (0: the next one)."""
        while len(self.ahead) <= j:
            self.ahead.append(self._draw())
        return self.ahead[j][1]

    def take(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The next token's ``(coin, race)``: (1,) or None, and (V,)."""
        return self.ahead.popleft() if self.ahead else self._draw()


def race_pick(probs: torch.Tensor, races: list[torch.Tensor]) -> torch.Tensor:
    """One token per row of ``probs`` (B, V), ``argmax(p / E)`` with row ``b``'s race
    ``races[b]`` (V,): what ``torch.multinomial(p, 1)`` draws with those variates.
    Returns (B,) on probs' device."""
    cpu = probs.detach().float().cpu()
    picks = [(cpu[b] / race).argmax().reshape(1) for b, race in enumerate(races)]
    return torch.cat(picks).to(probs.device)
