"""Drafts from what the model said before: a back-off table of its recorded alternatives.

Every generated token in a loom carries the model's top alternatives at its position
(``Node.top``): what the model expected after the tokens before it. This table keys
those expectations, and the tokens that actually followed, by the one and two tokens
before each position, over the document and the branches nearby. For the token about
to be fed it estimates what comes next (the two-token entry where there is one, backing
off to the one-token entry) and grows a small draft tree best first: the likeliest
continuations, a few tokens deep, within a budget of nodes.

Why: a sampled regeneration rarely repeats a sibling for long, so the tree's n-gram
matches (``decode.draft_tree.TreeIndex``) are rarely accepted; but the model's own expectations
after a familiar pair of tokens often hold again. Measured offline on the bench's
sampled regenerations (SmolLM2-135M, temperature 0.8, four seeds, three scenario
draws): with a 4-node tree, 0.29 drafts accepted per pass against 0.13 for the n-gram
matches, and 0.17 for this table without the alternatives. A perfect guess of the
model's top token (an oracle) would get 0.86.

Under sampling the drafted decoder grows the table's chain from the coming draws
(``propose_raced``, ``sample.ahead``): at each depth the token that draw's exponential
race would pick were the model's distribution the table's estimate, and, at the first
two depths, the next best of that ranking beside it. On the bench's sampled
regenerations (session samplers, six seeds) the first draft was the token drawn 37% of
the time (the likeliest token of the estimate: 30%), one of the three drafted there 61%.

The drafts only decide what is verified; the acceptance rule (``decode.draft_tree.accept_walk``)
keeps the model's distribution, so a wrong estimate costs time, never text.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from loomterm.engine.decode.draft_tree import DraftTree, nearby_nodes, tail_above
from loomterm.tree import Node

# A token that followed counts this much, next to an alternative's tempered probability
# (the alternatives carry the model's own view; what followed is one sample of it).
FOLLOWED_WEIGHT = 0.3
# Share of the estimate taken from the two-token entry when there is one.
PAIR_SHARE = 0.7
WIDTH = 4  # continuations considered per draft node
# Tokens drafted at the first draws' positions, from their race ranking (``propose_raced``).
RACE_WIDTHS = (3, 2)
TABLE = -2  # the draft source id of this table (``decode.draft_tree.Acceptance``)


class AlternativesTable:
    """next-token weights after one and after two tokens, from recorded positions.

    ``temperature`` tempers the recorded (untempered) log-probabilities as the sampler
    will; 0 (greedy) keeps only each position's top token. ``top_k``, ``top_p`` and
    ``min_p`` (0, 1 and 0: off) then cut the tempered alternatives as the sampler cuts
    the tempered distribution, so a token the sampler cannot draw is never drafted.
    """

    def __init__(
        self, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
    ) -> None:
        self.temperature = float(temperature)
        self.top_k, self.top_p, self.min_p = int(top_k), float(top_p), float(min_p)
        self.after_one: dict[int, dict[int, float]] = {}
        self.after_two: dict[tuple[int, int], dict[int, float]] = {}

    def add_position(
        self, before: Sequence[int], token: int, top: Sequence[tuple[int, float]] | None
    ) -> None:
        """One position: ``before`` (its last two tokens are used), the token that
        followed, and the model's alternatives there (or None where it was typed)."""
        if not before:
            return
        weights = [(int(token), FOLLOWED_WEIGHT)]
        if top:
            weights += self._tempered(top)
        keys: list[dict[int, float]] = [self.after_one.setdefault(int(before[-1]), {})]
        if len(before) >= 2:
            keys.append(self.after_two.setdefault((int(before[-2]), int(before[-1])), {}))
        for table in keys:
            for tok, weight in weights:
                table[tok] = table.get(tok, 0.0) + weight

    def add_run(
        self,
        tokens: Sequence[int],
        tops: Sequence[Sequence[tuple[int, float]] | None] | None,
        context: Sequence[int] = (),
    ) -> None:
        """Every position of ``tokens`` (after ``context``, the tokens before them)."""
        seq = list(context[-2:]) + list(tokens)
        lead = len(seq) - len(tokens)
        for j in range(len(tokens)):
            at = lead + j
            self.add_position(seq[max(0, at - 2) : at], tokens[j], tops[j] if tops else None)

    def add_node(self, node: Node, start: int = 0) -> None:
        """The positions of ``node.tokens[start:]``, with the path tokens before them."""
        before = tail_above(node, 2) + node.tokens[max(0, start - 2) : start]
        top = node.top[start:] if node.top else None
        self.add_run(node.tokens[start:], top, before)

    def _tempered(self, top: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
        if self.temperature <= 0:
            return [(int(top[0][0]), 1.0)]
        # Tempered over the recorded alternatives alone (the rest of the vocabulary is
        # a small share at the temperatures people sample at).
        scaled = [lp / self.temperature for _, lp in top]
        peak = max(scaled)
        mass = [math.exp(s - peak) for s in scaled]
        total = sum(mass)
        probs = sorted(
            ((int(t), m / total) for (t, _), m in zip(top, mass, strict=True)),
            key=lambda item: -item[1],
        )
        if self.top_k > 0:
            probs = probs[: self.top_k]
        if self.min_p > 0:
            floor = self.min_p * probs[0][1]
            probs = [item for item in probs if item[1] >= floor]
        if self.top_p < 1.0:
            kept, mass = [], 0.0
            for item in probs:
                kept.append(item)
                mass += item[1]
                if mass >= self.top_p:
                    break
            probs = kept
        total = sum(p for _, p in probs)
        return [(t, p / total) for t, p in probs]

    def weights(self, last: Sequence[int]) -> dict[int, float]:
        """Every token the table expects after ``last`` (its final two tokens), with
        estimated probabilities (the two-token entry's share, then the one-token's)."""
        out: dict[int, float] = {}
        if not last:
            return out
        share = 1.0
        if len(last) >= 2:
            pair = self.after_two.get((int(last[-2]), int(last[-1])))
            if pair:
                total = sum(pair.values())
                for tok, weight in pair.items():
                    out[tok] = PAIR_SHARE * weight / total
                share = 1.0 - PAIR_SHARE
        one = self.after_one.get(int(last[-1]))
        if one:
            total = sum(one.values())
            for tok, weight in one.items():
                out[tok] = out.get(tok, 0.0) + share * weight / total
        return out

    def estimate(self, last: Sequence[int]) -> list[tuple[int, float]]:
        """The likeliest next tokens after ``last`` (its final two tokens), best first,
        with estimated probabilities (at most ``WIDTH``)."""
        return heapq.nlargest(WIDTH, self.weights(last).items(), key=lambda item: item[1])

    def propose(self, tree: DraftTree, tail: Sequence[int], budget: int) -> int:
        """Grow up to ``budget`` new nodes under ``tree``'s root, best first by the
        estimated probability of reaching them. ``tail``: the document's last tokens,
        ending with the root's token. Returns how many nodes were added."""
        if budget <= 0:
            return 0
        start = len(tree)
        contexts = {0: list(tail[-2:])}
        frontier = [(-1.0, 0)]  # (-probability of the path to the node, node)
        while frontier and len(tree) - start < budget and not tree.full:
            chance, index = heapq.heappop(frontier)
            for token, q in self.estimate(contexts[index]):
                if len(tree) - start >= budget:
                    break
                child = tree.child(index, token, TABLE)  # may be another source's
                if child is None:
                    break
                if child not in contexts:
                    contexts[child] = [contexts[index][-1], token]
                    heapq.heappush(frontier, (chance * q, child))
        return len(tree) - start


def table_sampler(params) -> tuple[float, int, float, float]:
    """The table's view of a request's sampler (``sample.chain.SamplingParams``): its
    temperature (0 under greedy), top-k, top-p and min-p. Dynamic temperature and
    mirostat are read as their base temperature with no cut."""
    if params.greedy:
        return (0.0, 0, 1.0, 0.0)
    if getattr(params, "dynatemp_active", False) or getattr(params, "mirostat", 0):
        return (float(params.temperature), 0, 1.0, 0.0)
    return (float(params.temperature), int(params.top_k), float(params.top_p), float(params.min_p))


def table_near(parent: Node, sampler: tuple, budget: int) -> AlternativesTable:
    """A table of the last ``budget`` tokens of ``parent``'s path and then the branches
    nearest it (``decode.draft_tree.nearby_nodes``), up to ``budget`` tokens more. ``sampler``:
    ``AlternativesTable``'s arguments (temperature, top-k, top-p, min-p)."""
    table = AlternativesTable(*sampler)
    path = parent.path()
    left = budget
    for node in reversed(path):
        if left <= 0:
            break
        start = max(0, len(node.tokens) - left)
        table.add_node(node, start)
        left -= len(node.tokens) - start
    for node in nearby_nodes(parent, None, sum(len(n.tokens) for n in path) + budget)[len(path) :]:
        table.add_node(node)
    return table


def propose_raced(
    table: AlternativesTable,
    tree: DraftTree,
    tail: Sequence[int],
    depth: int,
    race_at: Callable[[int, list[int]], list[float]],
    widths: Sequence[int] = RACE_WIDTHS,
) -> int:
    """Grow a chain of up to ``depth`` drafts under ``tree``'s root from the coming
    draws themselves (``sample.ahead``): at depth ``d`` the token that draw would pick
    were the model's distribution the table's estimate ``q``, ``argmax q(c) / E_d(c)``.
    ``race_at(d, tokens)``: the exponentials of the ``d``-th coming draw (0: the token
    after the root) at ``tokens``. ``widths[d]``: the first draws also get the next best
    tokens of that ranking, as siblings of the chain's node (one token each: cheap in a
    small block, and the drawn token is often second or third). ``tail``: the
    document's last tokens, ending with the root's token. Returns how many nodes were
    added."""
    start, index = len(tree), 0
    context = list(tail[-2:])
    for d in range(depth):
        weights = table.weights(context)
        if not weights:
            break
        tokens = list(weights)
        races = race_at(d, tokens)
        ranked = sorted(
            zip(tokens, races, strict=True),
            key=lambda item: -weights[item[0]] / max(item[1], 1e-30),
        )
        token = ranked[0][0]
        child = tree.child(index, token, TABLE)
        if child is None:
            break
        width = widths[d] if d < len(widths) else 1
        for other, _ in ranked[1:width]:
            tree.child(index, other, TABLE)
        index, context = child, [context[-1], token]
    return len(tree) - start
