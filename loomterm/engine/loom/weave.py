"""Weave: grow a subtree by itself, level by level, keeping the best branches.

From a node, every level gives each node kept at the level above ``n`` children, as
one batch of siblings over their shared prefix (``Loom.generate(parent, n=n)``), then
keeps the best ``keep`` of everything that level made, by a score; only the kept
grow on. Depth ``d`` makes at most ``n + (d - 1) * keep * n`` nodes (20 for
``n=4, d=3, keep=2``). Nothing is lost:
the pruned stay in the tree as ordinary nodes (they are only not expanded), and every
node a weave made carries ``meta["weave"] = run id``, so the user can find, browse and
prune them like any other branch. (MiniHF's weave expands a tree the same way, one
request per node; here a level's siblings share their prefix's KV and one batch.)

Scores (pure functions of what the nodes recorded; no forward pass):

- ``logprob``: the mean log-probability of the tokens since the weave's start (the
  branch, not only the node, so a level compares whole continuations);
- ``perplexity``: ``exp(-mean log-probability)`` of the same tokens, lowest first. It
  orders branches exactly as ``logprob`` does; it is offered because it is the figure
  writers know, and it is the value reported;
- ``rating``: the user's ratings as they come (``node.meta["rating"]``: 1 good, -1
  bad; a node without one inherits the nearest rated ancestor inside the weave).
  Bad is pruned, even when fewer than ``keep`` remain, and a kept node rated bad
  before its turn is not expanded; good is kept first; unrated nodes are ranked by
  ``logprob``. Ratings are read when each level is ranked, so rating nodes while the
  weave runs steers the levels still to come.

Ties go to the node made first, so a seeded weave (``WeaveRequest.seed``) gives the
same tree every time: each batch gets a seed derived from the weave's seed, its level
and its parent's rank. ``cancel`` (a ``threading.Event``) stops within one token and
keeps what exists; a stopped level is ranked over what it made. ``progress(level,
done, total)`` reports the nodes made of those planned at each level.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomterm.errors import InputError, PrefillCancelled

if TYPE_CHECKING:
    from loomterm.engine.generation import OnToken
    from loomterm.engine.loom.facade import Loom
    from loomterm.tree import Node

SCORES = ("logprob", "perplexity", "rating")
SCORE_LABELS = {
    "logprob": "mean log-probability",
    "perplexity": "lowest perplexity",
    "rating": "your ratings (then log-probability)",
}
MAX_N = 64  # siblings per batch
MAX_DEPTH = 64
GOOD, BAD = 1, -1

Progress = Callable[[int, int, int], None]  # (level, done, total)


# -- scores: pure functions ---------------------------------------------------------------
def mean_logprob(logprobs: Sequence[float | None]) -> float:
    """Mean of the known log-probabilities; -inf when there are none."""
    known = [float(lp) for lp in logprobs if lp is not None]
    return sum(known) / len(known) if known else -math.inf


def perplexity(logprobs: Sequence[float | None]) -> float:
    """``exp(-mean log-probability)``; inf when no log-probability is known."""
    mean = mean_logprob(logprobs)
    return math.exp(-mean) if math.isfinite(mean) else math.inf


def score_value(score: str, logprobs: Sequence[float | None]) -> float:
    """The figure a score reports for a branch's log-probabilities (perplexity for
    ``perplexity``, the mean log-probability otherwise)."""
    return perplexity(logprobs) if score == "perplexity" else mean_logprob(logprobs)


@dataclass(frozen=True)
class Candidate:
    """One node of a level as the ranking sees it: ``order`` is when it was made,
    ``value`` its model score (higher is better), ``rating`` 1, -1 or None."""

    order: int
    value: float
    rating: int | None = None


def rank(candidates: Sequence[Candidate], keep: int, by_rating: bool = False) -> list[int]:
    """The ``order`` of the ``keep`` best candidates, best first. By the model score
    (ties: made first); ``by_rating``: rated bad never kept, rated good first."""
    pool = [c for c in candidates if not (by_rating and c.rating == BAD)]
    # -inf-safe: NaN (cannot happen from mean_logprob) would sort last.
    pool.sort(
        key=lambda c: (
            by_rating and c.rating != GOOD,
            -c.value if not math.isnan(c.value) else math.inf,
            c.order,
        )
    )
    return [c.order for c in pool[:keep]]


def derive_seed(seed: int, *where: int) -> int:
    """A 32-bit seed for one request of a seeded weave (``where``: level, parent rank,
    row), the same on every machine."""
    return zlib.crc32("/".join(str(int(part)) for part in (seed, *where)).encode())


def planned_nodes(n: int, depth: int, keep: int) -> int:
    """Nodes a weave makes when nothing ends early and nothing is rated bad."""
    total, parents = 0, 1
    for _ in range(depth):
        made = parents * n
        total += made
        parents = min(keep, made)
    return total


# -- request and result -------------------------------------------------------------------
@dataclass
class WeaveRequest:
    """One weave.

    Attributes:
        node: Where it starts (its path is every branch's prompt).
        n: Children per expanded node, generated as one batch.
        depth: Levels below ``node``.
        keep: Nodes kept per level (the only ones expanded).
        score: ``logprob``, ``perplexity`` or ``rating`` (module docstring).
        tokens: At most this many tokens per node.
        seed: Makes the weave repeatable; None draws fresh randomness.
        settings: Settings for every request, by name (``temperature``...); what is not
            given comes from ``loom.settings``.
        batched: False generates every child as its own request (the bench's baseline).
        cancel: Set it to stop within one token, keeping what exists.
        progress: ``progress(level, done, total)``, nodes made of those planned.
        on_token: ``on_token(node, token_id, piece)`` for every token of every node.
        run_id: The tag every node gets in ``meta["weave"]`` (default: random hex).
    """

    node: Node
    n: int = 4
    depth: int = 3
    keep: int = 2
    score: str = "logprob"
    tokens: int = 16
    seed: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    batched: bool = True
    cancel: threading.Event | None = None
    progress: Progress | None = None
    on_token: OnToken | None = None
    run_id: str | None = None

    def check(self) -> None:
        """Raise a one-line ``InputError`` for a value a weave cannot take."""
        for name, value, top in (
            ("n", self.n, MAX_N),
            ("depth", self.depth, MAX_DEPTH),
            ("keep", self.keep, MAX_N),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise InputError(f"weave {name} must be a whole number from 1 to {top}")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise InputError("weave tokens per node must be a whole number of at least 1")
        if self.score not in SCORES:
            raise InputError(f"weave score must be one of {', '.join(SCORES)}")
        clash = sorted(set(self.settings) & {"n", "max_new_tokens", "seed"})
        if clash:
            raise InputError(f"weave settings cannot set {clash[0]}: the weave sets it")
        if self.node.end == 0:
            raise InputError("nothing to weave from: type something first")

    @property
    def planned(self) -> int:
        """Nodes a weave makes when nothing ends early and nothing is rated bad."""
        return planned_nodes(self.n, self.depth, self.keep)


@dataclass
class WeaveLevel:
    """One level: the nodes it made (in the order made), the kept ones (best first),
    each node's score (``WeaveResult.scores``) and how long it took."""

    made: list[Node] = field(default_factory=list)
    kept: list[Node] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class WeaveResult:
    """What a weave made. Every node in ``levels`` is an ordinary node of the tree.

    Attributes:
        run_id: The ``meta["weave"]`` tag of its nodes.
        start: The node it grew from.
        score: The score it ranked by.
        levels: One per level reached.
        scores: Node id -> the score's value (perplexity, or mean log-probability).
        cancelled: True when ``cancel`` stopped it (what was made is kept).
        seconds, prefill_seconds, decode_seconds: Wall time, and the generations' own.
        requests: Generation requests made.
    """

    run_id: str
    start: Node
    score: str
    levels: list[WeaveLevel] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    cancelled: bool = False
    seconds: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    requests: int = 0

    @property
    def nodes(self) -> list[Node]:
        """Every node made, level by level."""
        return [node for level in self.levels for node in level.made]

    @property
    def made_per_level(self) -> list[int]:
        return [len(level.made) for level in self.levels]

    @property
    def kept_per_level(self) -> list[int]:
        return [len(level.kept) for level in self.levels]

    @property
    def tokens(self) -> int:
        return sum(len(node.tokens) for node in self.nodes)

    @property
    def best(self) -> Node | None:
        """The best kept node of the deepest level that kept one."""
        for level in reversed(self.levels):
            if level.kept:
                return level.kept[0]
        return None


# -- the weave ------------------------------------------------------------------------------
def branch_logprobs(start: Node, node: Node) -> list[float | None]:
    """Log-probabilities of the tokens from just below ``start`` down to ``node``."""
    chain: list[Node] = []
    walk: Node | None = node
    while walk is not None and walk is not start:
        chain.append(walk)
        walk = walk.parent
    return [lp for part in reversed(chain) for lp in part.logprobs]


def effective_rating(start: Node, node: Node) -> int | None:
    """``node``'s rating, or its nearest rated ancestor's below ``start``."""
    walk: Node | None = node
    while walk is not None and walk is not start:
        rating = walk.meta.get("rating")
        if rating in (GOOD, BAD):
            return int(rating)
        walk = walk.parent
    return None


def weave(loom: Loom, request: WeaveRequest) -> WeaveResult:
    """Run ``request`` on ``loom``; see the module docstring. Bad input raises a
    one-line ``InputError`` before anything is made."""
    request.check()
    loom.settings.replace(**request.settings)  # a bad setting: one line, nothing made
    run = _Run(loom, request)
    run.go()
    return run.result


class _Run:
    """The state of one weave while it runs."""

    def __init__(self, loom: Loom, request: WeaveRequest) -> None:
        self.loom = loom
        self.request = request
        self.result = WeaveResult(
            run_id=request.run_id or secrets.token_hex(4),
            start=request.node,
            score=request.score,
        )
        self.began = time.perf_counter()

    @property
    def stopped(self) -> bool:
        cancel = self.request.cancel
        return cancel is not None and cancel.is_set()

    def go(self) -> None:
        request, result = self.request, self.result
        parents = [request.node]
        try:
            for depth in range(1, request.depth + 1):
                level = WeaveLevel()
                result.levels.append(level)
                began = time.perf_counter()
                try:
                    self._grow(depth, parents, level)
                finally:
                    level.kept = self._keep(level.made)
                    level.seconds = time.perf_counter() - began
                eos = self.loom.eos_ids
                parents = [n for n in level.kept if not (n.tokens and n.tokens[-1] in eos)]
                if self.stopped or not parents:
                    break
        except PrefillCancelled:  # escape while a path was read: what exists stays
            pass
        result.cancelled = self.stopped or result.cancelled
        result.seconds = time.perf_counter() - self.began

    def _grow(self, depth: int, parents: list[Node], level: WeaveLevel) -> None:
        """Give each parent ``n`` children (one batch, or one request each)."""
        request = self.request
        total = len(parents) * request.n
        self._progress(depth, 0, total)
        for rank_, parent in enumerate(parents):
            if self.stopped:
                return
            if request.score == "rating" and effective_rating(request.node, parent) == BAD:
                total -= request.n  # rated bad since it was kept: its branch grows no more
                self._progress(depth, len(level.made), total)
                continue
            if request.batched:
                seed = None if request.seed is None else derive_seed(request.seed, depth, rank_)
                self._generate(parent, request.n, seed, level)
            else:
                for row in range(request.n):
                    if self.stopped:
                        return
                    seed = (
                        None
                        if request.seed is None
                        else derive_seed(request.seed, depth, rank_, row)
                    )
                    self._generate(parent, 1, seed, level)
                    self._progress(depth, len(level.made), total)
            self._progress(depth, len(level.made), total)

    def _generate(self, parent: Node, n: int, seed: int | None, level: WeaveLevel) -> None:
        loom, request = self.loom, self.request
        with loom.exclusive():  # last_result is this request's
            kids = loom.generate(
                parent,
                request.tokens,
                n=n,
                seed=seed,
                cancel=request.cancel,
                on_token=request.on_token,
                # A weave grows below its node: the first level is not healed into
                # its parent (``loom.healing``), so its scores read from the node.
                **{**request.settings, "token_healing": "off"},
            )
            done = loom.last_result
        self.result.requests += 1
        if done is not None:
            self.result.prefill_seconds += done.prefill_seconds
            self.result.decode_seconds += done.decode_seconds
        for kid in kids:
            loom.set_meta(kid, weave=self.result.run_id)
            self.result.scores[kid.id] = score_value(
                request.score, branch_logprobs(request.node, kid)
            )
        level.made.extend(kids)

    def _keep(self, made: list[Node]) -> list[Node]:
        """The best ``keep`` of a level, best first (ratings read now)."""
        start, score = self.request.node, self.request.score
        candidates = [
            Candidate(
                order,
                mean_logprob(branch_logprobs(start, node)),
                effective_rating(start, node) if score == "rating" else None,
            )
            for order, node in enumerate(made)
        ]
        return [made[i] for i in rank(candidates, self.request.keep, score == "rating")]

    def _progress(self, level: int, done: int, total: int) -> None:
        if self.request.progress is not None:
            self.request.progress(level, done, total)
