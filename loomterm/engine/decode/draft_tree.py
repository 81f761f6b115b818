"""Draft tokens for speculative decoding, from the loom itself: no draft model.

Two sources propose continuations of the document; both end up in one ``DraftTree``
(a trie rooted at the token about to be fed), which a single forward pass verifies
under a tree attention mask (``decode.drafted`` runs that loop).

- **The tree** (``TreeIndex``). Prompt-lookup decoding (Saxena, 2023) matches the last
  few tokens of the document against earlier text and proposes what followed there.
  Here the text searched is the loom's tree: the document *and* its sibling and cousin
  branches. An n-gram match is a position in some node; its continuation runs down that
  node and on into each of its children, so the loom's own alternatives become the
  branches of the draft tree. Regenerating from a point the user has regenerated
  from before is the common case, and there the old branches are exactly right.
- **Lookahead decoding** (Fu et al., 2024, "Break the Sequential Dependency of LLM
  Inference Using Lookahead Decoding"; llama.cpp's ``examples/lookahead``). A window of
  ``N - 1`` levels by ``W`` slots runs Jacobi iterations alongside the verification:
  each step every slot of the last level predicts one more token, each column then
  forms an n-gram, and n-grams keyed by their first token fill a pool. Pool entries
  that start with the current token are verified as drafts.

Acceptance (``accept_walk``) is the speculative-sampling rule for deterministic drafts:
a drafted token ``x`` is accepted with probability ``p(x)`` under the verified
distribution, and on rejection the next token is drawn from the residual
``p(. | not x)``. It is realised with *one* draw per emitted token: draw ``y ~ p`` and
accept the child holding ``y`` if there is one. That has exactly the rule's law
(``P(accept x) = p(x)``, and a rejected draw is distributed as the residual; with several
candidate children it is the sequential multi-candidate rule), and it consumes the
random stream exactly as plain decoding does, so a seed yields the same text with
drafting on or off. Under greedy the draw is the argmax, so the output is plain
decoding's, token for token.

Everything here is torch-light bookkeeping over token ids; the model never appears.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from loomterm.tree import Node


@dataclass(frozen=True)
class Cost:
    """Time of a forward pass of ``1 + d`` tokens, in single-token passes:
    ``1 + jump + slope * max(0, d - free)`` for ``d >= 1``.

    On a CPU one token runs as matrix-vector products, and any second token turns them
    into matrix-matrix products. With float32 weights in oneDNN's own layout
    (``kernels.cpu_linear``) one row is padded to four, so up to four drafts ride along
    at about no cost: measured on SmolLM2-135M (one thread, an AMD EPYC, the decode
    step's blocks), 1-4 drafts cost 0.97-1.06x a plain step, 5 1.10x, 9 1.37x, 15
    1.70x, 31 2.76x. With PyTorch's own products (no oneDNN) two tokens cost 1.55x one,
    sixteen 2.35x, thirty-two 3.3x. With quantized weights (f16, int8, int4) a block of
    a few tokens costs 1.2-1.8x a step, sixteen 3-4x. On a GPU a small block is nearly
    free. ``draft_ledger`` scales ``jump`` and ``slope`` to what passes really cost.
    """

    jump: float
    slope: float
    free: int = 0  # drafts that cost no more than the pending token alone

    def of(self, drafts: int) -> float:
        """A pass of the pending token and ``drafts`` drafted ones, in single steps."""
        return 1.0 + self.jump + self.slope * max(0, drafts - self.free) if drafts else 1.0

    @classmethod
    def for_device(cls, kind: str, quantized: bool = False, onednn: bool = True) -> Cost:
        """The static guess for a device: ``onednn``, float32 products on oneDNN's
        reordered weights (``kernels.cpu_linear.onednn_available``)."""
        if kind != "cpu":
            return cls(0.05, 0.01)
        if quantized:
            return cls(0.0, 0.09)
        return cls(0.05, 0.06, free=4) if onednn else cls(0.4, 0.07)


@dataclass(frozen=True)
class DraftConfig:
    """How much to draft per step, and from where.

    Attributes:
        max_ngram: Longest suffix of the document looked up in the tree index.
        min_ngram: Shortest suffix worth a lookup (1 matches any repeated token).
        tree_budget: Draft tokens from the tree per step (the trie's size, root excluded).
        max_depth: Longest drafted continuation.
        per_key: Positions remembered per n-gram (the newest ones).
        pool_tokens: At most this many tokens of nearby branches are indexed.
        lookahead: Run lookahead decoding's Jacobi window in the same forward.
        window: Lookahead window width ``W`` (slots per level).
        ngram: Lookahead n-gram size ``N`` (the window has ``N - 1`` levels).
        guesses: Pool n-grams kept per first token (``G``), all verified.
        cost: What a block of drafts costs next to a plain step (sets how deep
            drafting pays; see ``Acceptance``).
        table_tokens: Tokens of the document and nearby branches whose recorded
            alternatives feed the alternatives table (``decode.draft_table``); 0: no table.
        table_budget: At most this many table drafts per step.
        race_depth: Longest chain of table drafts that follow the coming draws
            (sampled decoding, ``decode.draft_table.propose_raced``).
        probe_every: When no source pays, still draft one token every this many steps,
            so a source that starts to repeat is noticed.
        adaptive: Stop drafting (but for probes, further and further apart) while the
            drafts do not pay for their passes, judged across generations
            (``decode.draft_ledger.Ledger``): the ``auto`` mode.
    """

    max_ngram: int = 4
    min_ngram: int = 1
    # A 32-token block is 3x a one-token pass on a CPU and still pays when a branch is
    # being regenerated (and stays within the working cache's short-query attention).
    tree_budget: int = 31
    max_depth: int = 31
    per_key: int = 8
    pool_tokens: int = 1 << 15
    lookahead: bool = False
    window: int = 4
    ngram: int = 3
    guesses: int = 4
    cost: Cost = Cost(0.6, 0.045)
    table_tokens: int = 1024
    table_budget: int = 3
    race_depth: int = 8
    probe_every: int = 8
    adaptive: bool = False


# Draft sources: a tree match of k tokens is source k (1..max_ngram); these are the others.
ROOT = -1
POOL = 0  # lookahead's n-gram pool


# -- the draft trie --------------------------------------------------------------------
class DraftTree:
    """A trie of drafted tokens. Node 0 is the root: the token being fed this step,
    already chosen. Every other node is a guess for the token after its parent."""

    def __init__(self, root_token: int, capacity: int) -> None:
        self.tokens = [int(root_token)]
        self.parents = [-1]
        self.depths = [0]
        self.sources = [ROOT]  # which source drafted each node (see ``Acceptance``)
        self.children: list[dict[int, int]] = [{}]
        self.capacity = capacity  # nodes, root included

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def full(self) -> bool:
        return len(self.tokens) >= self.capacity

    def child(self, index: int, token: int, source: int = POOL) -> int | None:
        """The child of ``index`` holding ``token``, made if missing and room is left."""
        found = self.children[index].get(token)
        if found is not None or self.full:
            return found
        self.tokens.append(token)
        self.parents.append(index)
        self.depths.append(self.depths[index] + 1)
        self.sources.append(source)
        self.children.append({})
        new = len(self.tokens) - 1
        self.children[index][token] = new
        return new

    def add_sequence(self, tokens: Iterable[int], max_depth: int, source: int = POOL) -> None:
        """Add one drafted continuation of the root."""
        index = 0
        for token in tokens:
            if self.depths[index] >= max_depth:
                return
            nxt = self.child(index, int(token), source)
            if nxt is None:
                return
            index = nxt

    def is_chain(self) -> bool:
        """True when every node has at most one child (plain causal order works)."""
        return all(len(kids) <= 1 for kids in self.children)

    def ancestry(self) -> torch.Tensor:
        """(n, n) bool: row ``i`` is True at ``i`` and at each of its ancestors."""
        n = len(self.tokens)
        mask = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            parent = self.parents[i]
            if parent >= 0:
                mask[i] = mask[parent]  # parents come before their children
            mask[i, i] = True
        return mask


# -- drafts from the loom's tree -------------------------------------------------------
def tail_above(node: Node, count: int) -> list[int]:
    """The last ``count`` path tokens before ``node``'s first token."""
    out: list[int] = []
    above = node.parent
    while above is not None and len(out) < count:
        out[:0] = above.tokens[max(0, len(above.tokens) - (count - len(out))) :]
        above = above.parent
    return out


def nearby_nodes(parent: Node, skip: Node | None, budget: int) -> list[Node]:
    """Nodes worth searching for drafts after ``parent``: its path (the document), then
    the branches hanging off it, closest first (siblings, then cousins...), until
    ``budget`` tokens are gathered. ``skip`` (the node being generated) is left out."""
    path = parent.path()
    out = list(path)
    total = sum(len(n.tokens) for n in path)
    on_path = {id(n) for n in path}
    if skip is not None:
        on_path.add(id(skip))
    for anc in reversed(path):
        for child in reversed(anc.children):  # the newest branches first
            if id(child) in on_path:
                continue
            for node in child.walk():
                if total >= budget:
                    return out
                out.append(node)
                total += len(node.tokens)
    return out


class TreeIndex:
    """n-grams of the document and nearby branches -> where they occur in the tree.

    An entry ``(node, offset)`` says an n-gram ends just before ``node.tokens[offset]``;
    what follows it there (down ``node`` and on into its children) is a draft.
    """

    def __init__(self, max_ngram: int, per_key: int) -> None:
        self.max_ngram = max_ngram
        self.per_key = per_key
        self.table: dict[tuple[int, ...], deque[tuple[Node, int]]] = {}

    def add(self, node: Node, start: int = 0, context: list[int] | None = None) -> None:
        """Index the n-grams that end at ``node.tokens[start:]``. ``context``: the path
        tokens before ``node.tokens[start]`` (looked up when not given)."""
        n = self.max_ngram
        if context is None:
            before = tail_above(node, n - 1) + node.tokens[:start]
        else:
            before = context
        before = before[len(before) - (n - 1) :] if n > 1 else []
        seq = before + node.tokens[start:]
        lead = len(before)
        table, per_key = self.table, self.per_key
        for j in range(lead, len(seq)):
            offset = start + j - lead + 1  # the continuation starts after seq[j]
            for k in range(1, min(n, j + 1) + 1):
                key = tuple(seq[j - k + 1 : j + 1])
                hits = table.get(key)
                if hits is None:
                    hits = table[key] = deque(maxlen=per_key)
                hits.append((node, offset))

    def propose(
        self,
        tree: DraftTree,
        tail: list[int],
        min_ngram: int,
        depth_for: Callable[[int], int],
        limit: int | None = None,
    ) -> int:
        """Add continuations of the document (whose last tokens are ``tail``, ending with
        the root's token) to ``tree``, longest suffix match first, newest first.
        ``depth_for(k)``: how deep to draft after a match of ``k`` tokens (0: skip).
        ``limit``: stop once the tree has this many nodes. Returns the longest n-gram
        that matched (0 if none)."""
        limit = tree.capacity if limit is None else min(limit, tree.capacity)
        seen: set[tuple[int, int]] = set()
        best = 0
        for k in range(min(self.max_ngram, len(tail)), min_ngram - 1, -1):
            hits = self.table.get(tuple(tail[len(tail) - k :]))
            depth = depth_for(k) if hits else 0
            if not depth:
                continue
            for node, offset in reversed(hits):
                if len(tree) >= limit:
                    return best
                if (node.id, offset) in seen:
                    continue
                seen.add((node.id, offset))
                if _walk_into(tree, node, offset, depth, limit, k):
                    best = max(best, k)
        return best


def _walk_into(
    tree: DraftTree, node: Node, offset: int, max_depth: int, limit: int, source: int
) -> bool:
    """Add what follows ``node.tokens[offset]`` in the loom (down every child) under the
    draft tree's root. Returns True if anything followed."""
    stack = [(0, node, offset)]
    found = False
    while stack:
        index, item, pos = stack.pop()
        while pos < len(item.tokens) and tree.depths[index] < max_depth:
            nxt = tree.child(index, item.tokens[pos], source) if len(tree) < limit else None
            if nxt is None:
                nxt = tree.children[index].get(item.tokens[pos])
                if nxt is None:
                    return found
            index, pos, found = nxt, pos + 1, True
        if pos >= len(item.tokens) and tree.depths[index] < max_depth:
            # Oldest child pushed last, so popped first: the first branch is explored
            # deepest before the budget runs out. Children are the loom's alternatives.
            for child in reversed(item.children):
                stack.append((index, child, 0))
    return found


# -- acceptance --------------------------------------------------------------------------
def accept_walk(
    tree: DraftTree, choose: Callable[[int], int], stop: Callable[[int, int], bool]
) -> list[tuple[int, int, int | None]]:
    """Walk the verified tree from its root, one model choice per emitted token.

    ``choose(i)`` is the model's token after tree node ``i`` (drawn from the verified
    distribution at ``i``: argmax under greedy, one sample otherwise).
    ``stop(token, emitted)`` ends the walk after a token (end of sequence, budget).
    Returns ``(row, token, node)`` per emitted token: the tree node whose logits chose
    it, the token, and the tree node that holds it (its KV is already computed) or None
    for the last token when no draft matched it.
    """
    out: list[tuple[int, int, int | None]] = []
    index = 0
    while True:
        token = int(choose(index))
        child = tree.children[index].get(token)
        out.append((index, token, child))
        if child is None or stop(token, len(out)):
            return out
        index = child


def walk_trials(tree: DraftTree, walk: list[tuple[int, int, int | None]]) -> list[tuple[int, bool]]:
    """What a walk says about each source: ``(source, accepted)`` per emitted token that
    had drafted children to choose from. A hit counts for the child's source; a miss
    for the strongest source among the children offered."""
    trials = []
    for row, _token, child in walk:
        offered = tree.children[row]
        if not offered:
            continue
        if child is not None:
            trials.append((tree.sources[child], True))
        else:
            trials.append((max(tree.sources[c] for c in offered.values()), False))
    return trials


class Acceptance:
    """Running acceptance rate per draft source, and the draft depth it pays for.

    A forward pass of ``1 + d`` tokens costs about ``1 + jump + slope * d`` single-token
    passes (``Cost``). With a per-token acceptance ``a`` a chain of ``d`` drafts yields
    ``1 + a + ... + a^d`` tokens, so the depth is the ``d`` that maximises tokens per
    unit of time -- 0 when drafting does not pay, as for a high-temperature sample that
    rarely repeats a branch.
    """

    def __init__(self, cost: Cost, max_depth: int, decay: float = 0.95) -> None:
        self.cost, self.max_depth, self.decay = cost, max_depth, decay
        self.hits: dict[int, float] = {}
        self.tries: dict[int, float] = {}
        self._depth: dict[int, int] = {}

    def rate(self, source: int) -> float:
        """Posterior mean acceptance (a weak prior at one half)."""
        return (self.hits.get(source, 0.0) + 0.5) / (self.tries.get(source, 0.0) + 1.0)

    def update(self, trials: list[tuple[int, bool]]) -> None:
        for source, ok in trials:
            # Decay old evidence so the rate follows the text (a quoted passage ends).
            self.hits[source] = self.hits.get(source, 0.0) * self.decay + ok
            self.tries[source] = self.tries.get(source, 0.0) * self.decay + 1.0
            self._depth.pop(source, None)

    def use_cost(self, cost: Cost) -> None:
        """Judge depths by ``cost`` from now on (a calibrated one: ``draft_ledger``)."""
        if cost != self.cost:
            self.cost = cost
            self._depth.clear()

    def depth(self, source: int) -> int:
        if source not in self._depth:
            self._depth[source] = best_depth(self.rate(source), self.cost, self.max_depth)
        return self._depth[source]


def best_depth(rate: float, cost: Cost, max_depth: int) -> int:
    """argmax over d of (1 + rate + ... + rate^d) / (1 + jump + slope * d), 0 if none
    beats a plain step."""
    best, best_value = 0, 1.0
    gain, term = 1.0, 1.0
    for d in range(1, max_depth + 1):
        term *= rate
        gain += term
        value = gain / (1.0 + cost.jump + cost.slope * d)
        if value > best_value:
            best, best_value = d, value
    return best
