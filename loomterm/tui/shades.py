"""The five shades a token is coloured in when the document shows probabilities (f6)
or surprisal (f9): which shade a token's log probability falls in, and the same edges
written for people (the shade legend's labels). No Textual.
"""

from __future__ import annotations

import math

# Probability buckets: the chosen token's probability at least this -> bucket index.
PROB_BUCKETS = (0.8, 0.5, 0.25, 0.1)
# Surprisal buckets: -log2 p below this many bits -> bucket index (the same colours).
SURPRISAL_BITS = (2.0, 4.0, 7.0, 11.0)


def surprisal_bucket(logprob: float | None) -> int:
    """1 (expected) .. 5 (a surprise, 11 bits or more); 0 when unknown."""
    if logprob is None:
        return 0
    bits = -logprob / math.log(2)
    for index, ceiling in enumerate(SURPRISAL_BITS):
        if bits < ceiling:
            return index + 1
    return 5


def prob_bucket(logprob: float | None) -> int:
    """1 (likely) .. 5 (unlikely); 0 when unknown (typed text)."""
    if logprob is None:
        return 0
    p = math.exp(logprob)
    for index, floor in enumerate(PROB_BUCKETS):
        if p >= floor:
            return index + 1
    return 5


# The bucket edges above, written for people (``widgets.shade_legend``).
SURPRISAL_LABELS = ("<2 bits", "2-4", "4-7", "7-11", "\u226511 bits")
PROBABILITY_LABELS = ("\u226580%", "50-80%", "25-50%", "10-25%", "<10%")
