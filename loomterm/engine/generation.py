"""What a generation asks for and what it gives back, and how a decoder writes nodes.

A decoder (``decode.plain.plain_decode``, ``decode.drafted.drafted_decode``, or a remote
runner's stream) receives one :class:`GenerateRequest` and returns one
:class:`GenerateResult`. It adds to the tree only through a :class:`NodeWriter`, which
announces every change on the loom's event bus, so the session file and the editor see
each token as it arrives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomterm.engine.events import Event
from loomterm.tree import Node, Origin, Tree

if TYPE_CHECKING:
    from loomterm.engine.sample.chain import SamplingParams
    from loomterm.engine.sample.healing import Heal

OnToken = Callable[[Node, int, str], None]
Emit = Callable[[Event, "Node | None"], None]


@dataclass
class GenerateRequest:
    """One generation: ``n`` continuations of ``node``'s path.

    Attributes:
        node: Where the continuations start (its path is the prompt).
        max_new_tokens: At most this many tokens per continuation.
        n: How many continuations (siblings), decoded as one batch where possible.
        sampling: The sampler settings.
        seed: Seeds one random stream per row; None draws fresh randomness.
        drafting: "auto", "tree", "lookahead" or "off" (``decode.drafted.MODES``).
        on_token: ``on_token(child, token_id, piece)`` as each token arrives.
        cancel: Set it to stop within one token, keeping what came.
        banned: Phrases the continuation must never contain (``banned``).
        banned_ignore_case: Match ``banned`` without regard to case.
        on_take_back: ``on_take_back(child, length)`` when a banned phrase made the
            child go back to its first ``length`` tokens (what came after is gone).
        context: The context version the model sees (``loomterm.config.injection``): None
            the current settings' memory, author's note and world info, "" none.
        healing: Token healing asked for (the ``token_healing`` setting): "on" heals a
            typed word's end, "auto" only where the model expects the word to go on,
            "off" never; the Loom plans it (``loom.healing``) where the runner can.
        heal: The typed text the first tokens must spell again, planned by the Loom
            (``sample.healing.Heal``); None: no healing.
    """

    node: Node
    max_new_tokens: int
    n: int
    sampling: SamplingParams
    seed: int | None = None
    drafting: str = "auto"
    on_token: OnToken | None = None
    cancel: threading.Event | None = None
    banned: tuple[str, ...] = ()
    banned_ignore_case: bool = False
    on_take_back: Callable[[Node, int], None] | None = None
    context: str | None = None
    healing: str = "off"
    heal: Heal | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def sampling_record(self) -> dict[str, Any]:
        """What a generated node records of how it was made (``Node.sampling``)."""
        record = self.sampling.as_dict()
        if self.banned:
            record["banned_strings"] = list(self.banned)
            record["banned_strings_ignore_case"] = self.banned_ignore_case
        return record


@dataclass
class GenerateResult:
    """What a generation made.

    Attributes:
        children: The new nodes, one per continuation that produced a token (a
            generation cancelled before its first token makes none).
        drafting: What drafted decoding did, when it ran; None for plain decoding.
        prefill_seconds: Time to bring the prompt's KV into the model's cache.
        decode_seconds: Time spent producing tokens.
    """

    children: list[Node] = field(default_factory=list)
    drafting: DraftStats | None = None
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(len(child.tokens) for child in self.children)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass
class DraftStats:
    """What one drafted generation did."""

    steps: int = 0  # forward passes
    emitted: int = 0  # tokens generated
    drafted: int = 0  # draft tokens sent to the model
    accepted: int = 0  # of them, accepted
    lookahead: bool = False
    per_step: list[int] = field(default_factory=list)  # tokens emitted per forward
    by_source: dict[int, int] = field(default_factory=dict)  # accepted drafts per source

    @property
    def tokens_per_step(self) -> float:
        return self.emitted / self.steps if self.steps else 0.0

    @property
    def accepted_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


class NodeWriter:
    """A decoder's only way to change the tree: new children, tokens, flags.

    Every call announces its change. ``children`` lists what was made so far, so the
    loom can finish (``done``) each one even when decoding stops with an error.
    """

    def __init__(self, tree: Tree, emit: Emit) -> None:
        self.tree = tree
        self.emit = emit
        self.children: list[Node] = []
        self.meta: dict[str, Any] = {}  # given to every new child (its context version)

    def new_child(self, parent: Node, sampling: dict[str, Any], seed: int | None) -> Node:
        """An empty generated child of ``parent``, filled by :meth:`push`."""
        child = self.tree.add(
            parent, [], Origin.MODEL, sampling=sampling, seed=seed, meta=dict(self.meta)
        )
        self.children.append(child)
        self.emit(Event.ADD, child)
        return child

    def push(self, node: Node, token: int, logprob: float, top: list) -> None:
        """Append one token with its log-probability and top alternatives."""
        node.tokens.append(token)
        node.logprobs.append(logprob)
        node.top.append(top)
        self.emit(Event.TOKENS, node)

    def take_back(self, node: Node, length: int) -> None:
        """Keep only ``node``'s first ``length`` tokens (a banned phrase began there)."""
        del node.tokens[length:], node.logprobs[length:], node.top[length:]
        self.emit(Event.TOKENS, node)

    def mark_approx(self, node: Node, approx: bool = True) -> None:
        """Flag ``node``'s KV as approximate (re-rotated or built on re-rotated KV)."""
        if node.approx != approx:
            node.approx = approx
            self.emit(Event.UPDATE, node)


class Stopwatch:
    """Seconds since it was made, for the result's timings."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self.start = now - self.start, now
        return seconds
