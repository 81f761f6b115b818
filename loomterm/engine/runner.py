"""The runner interface: what the Loom's tree operations need from a model.

A runner owns the model and whatever cache sits beside it. The Loom keeps the tree and
asks its runner to bring a path into the model's cache (``prepare``) and to continue
one (``decode``). Two kinds are meant to sit behind the same tree operations:

- the local runner (``local.runner.LocalRunner``): a transformers model in this
  process, each node's KV kept on the node, one working cache for the active path;
- a remote runner: a serving engine over HTTP, whose own prefix cache plays the part
  of the KV tree (the server recomputes only what changed when a path is sent again).

What only some runners can do is declared in :class:`Capabilities`; tree operations
ask for a capability instead of testing a runner's type.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomterm.engine.events import Event
from loomterm.engine.kv.resident import KVBytes

if TYPE_CHECKING:
    import torch

    from loomterm.engine.context import Assembled, Assembly
    from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
    from loomterm.engine.text import TokenText
    from loomterm.tree import Node, Tree

Progress = Callable[[str, int, "int | None"], None]


@dataclass(frozen=True)
class Capabilities:
    """What a runner can do beyond the common operations.

    Attributes:
        rerope: Fast splice: move cached keys to new positions by re-rotating them.
        full_logits: ``prepare`` returns the whole next-token distribution.
        node_kv: KV lives on the tree's nodes (memory budget, eviction, refresh of
            approximate KV, KV snapshots).
        batched_siblings: ``n`` continuations decode as one batch over one prefix.
        drafting: Drafted (speculative) decoding from the tree.
        prompt_logprobs: Log-probabilities of prompt tokens come with the prefill.
        healing: Token healing: the first tokens of a generation constrained to spell
            typed text again (``sample.healing``); needs the full logits.
        why_not: One line per missing capability, saying why (for the editor).
    """

    rerope: bool = False
    full_logits: bool = False
    node_kv: bool = False
    batched_siblings: bool = False
    drafting: bool = False
    prompt_logprobs: bool = False
    healing: bool = False
    why_not: tuple[tuple[str, str], ...] = ()

    def reason(self, name: str) -> str:
        """Why ``name`` is missing ("" when it is there or no reason was given)."""
        return dict(self.why_not).get(name, "")


class Runner(ABC):
    """A model behind the Loom. See the module docstring.

    Attributes:
        name: The model's name, for the status bar and the session file.
        where: Where it runs, for the status bar ("cpu · torch (1 thread)", "cpu ·
            llama.cpp (2 threads)", a server's URL).
        backend: What runs it: ``torch``, ``llama.cpp`` or ``server``.
        threads: CPU threads it decodes with (None: not this process's CPU).
        options: The ``engine.open.RunnerOptions`` it was opened with (set by
            ``engine.open``; None for a runner made directly).
        capabilities: What this runner can do (:class:`Capabilities`).
        codec: Token ids to bytes, text and display pieces (``text.TokenText``).
        vocab_size: Token ids run from 0 to ``vocab_size - 1``.
        eos_ids: Tokens that end a continuation.
        n_ctx: The context window, in tokens.
        progress: ``progress(stage, done, total)`` during long work (prefill).
        interrupt: When set, a long prefill stops between two chunks by raising
            :class:`~loomterm.errors.PrefillCancelled` (runners that cannot stop
            ignore it).
    """

    name: str
    where: str
    capabilities: Capabilities
    codec: TokenText
    vocab_size: int
    eos_ids: frozenset[int]
    n_ctx: int
    progress: Progress | None = None
    interrupt: threading.Event | None = None
    tree: Tree | None = None  # set by ``attach``
    backend: str = "server"
    threads: int | None = None
    options: Any = None  # ``engine.open.RunnerOptions``: a lower layer cannot name it

    _assembly: Assembly | None = None  # the one given to the operation running now

    def context_for(
        self, node: Node, reserve: int = 0, world_info: list[tuple[int, ...]] | None = None
    ) -> Assembled | None:
        """The injected sequence for ``node`` under the running operation's assembly
        (``Runner.context``; ``engine.context``), None when plain. ``world_info``:
        entries to keep instead of scanning (``ContextKV.refill``)."""
        assembly = self._assembly
        return None if assembly is None else assembly(node.path_tokens(), reserve, world_info)

    def attach(self, tree: Tree, emit: Callable[[Event, Node | None], None]) -> None:
        """Called once by the Loom: the tree this runner computes for, and where to
        announce a node whose flags it changed."""
        self.tree = tree
        self.emit = emit

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What a session file records about the model (name, source, fingerprint,
        dtype), so a session is not silently reopened on another model."""

    @abstractmethod
    def encode(self, text: str, at_start: bool = False) -> list[int]:
        """Token ids of ``text``; ``at_start`` lets the tokenizer add its start token."""

    def context(self, assembly: Assembly | None = None) -> contextlib.AbstractContextManager:
        """Held around every Loom operation (the local runner: inference mode).
        ``assembly``: what the model sees for a node during it (``context.Assembly``;
        None: the plain path), handed in by the Loom, the part that knows it."""
        return self.assembling(assembly)

    @contextlib.contextmanager
    def assembling(self, assembly: Assembly | None) -> Iterator[None]:
        """Use ``assembly`` for ``context_for`` for the duration of the block."""
        previous, self._assembly = self._assembly, assembly
        try:
            yield
        finally:
            self._assembly = previous

    @abstractmethod
    def prepare(self, node: Node) -> torch.Tensor | None:
        """Bring ``node``'s path into the model's cache. Returns the (V,) next-token
        logits when ``capabilities.full_logits``, else None."""

    @abstractmethod
    def decode(self, request: GenerateRequest, writer: NodeWriter) -> GenerateResult:
        """Continue ``request.node``'s path, writing children through ``writer``."""

    def moved_kv(self, source: Node, lo: int, hi: int, delta: int) -> torch.Tensor:
        """``source``'s KV for tokens ``[lo, hi)`` moved ``delta`` positions (rerope)."""
        raise NotImplementedError("this runner cannot move cached keys")

    def can_move(self, pieces: list[tuple[Node, int, int]]) -> bool:
        """Whether the cached KV of these (node, lo, hi) pieces can be moved (rerope)."""
        return False

    def split(self, head: Node, tail: Node, offset: int) -> None:  # noqa: B027
        """The tree moved ``tail``'s first ``offset`` tokens into the new node ``head``."""

    def refresh(self, node: Node) -> None:  # noqa: B027 - a server is always exact
        """Recompute, exactly, any approximate KV on ``node``'s path."""

    def forget(self, node: Node) -> None:  # noqa: B027 - optional for runners
        """``node``'s KV changed or is gone: stop using any cached copy of it."""

    def rewrite(self, node: Node, keep: int) -> None:
        """``node``'s tokens from ``keep`` on are being replaced in place (the writer's
        own text, retyped; ``Loom.retype``): stop using what was cached of them. By
        default, everything cached of ``node``."""
        self.forget(node)

    def evict(self, node: Node) -> bool:
        """Drop ``node``'s cached KV (it is recomputed when needed). True if dropped."""
        return False

    def kv_bytes(self) -> KVBytes:
        """KV bytes this runner holds in this process."""
        return KVBytes()

    def close(self) -> None:  # noqa: B027 - optional for runners
        """Release what the runner holds (connections, buffers)."""

    @contextlib.contextmanager
    def reporting(self, progress: Progress | None) -> Iterator[None]:
        """Report progress to ``progress`` for the duration of the block."""
        previous, self.progress = self.progress, progress
        try:
            yield
        finally:
            self.progress = previous
