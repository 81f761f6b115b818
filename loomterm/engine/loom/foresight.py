"""Foresight: a generation written ahead of the writer's request, out of sight.

While the writer pauses, the editor asks the loom to *foresee* the request its next key
would make (``Loom.foresee``, the editor's think-ahead: ``tui.controllers.think_ahead``):
the very generation ctrl+r or ctrl+n would run, from the same node with the same
settings and count, whose children are *foreseen* nodes: nodes the tree holds beside
its nodes (``Tree.foreseen``), not among them: no parent lists it and no event announces
it (the event bus hides it), so the session file, the panes, exports, search, undo and
the counts never see it. Its KV is kept as a generated child's is.

When the request comes, ``Loom.take_foresight`` compares it with what was foreseen. If
it matches (the same node, whose path still has the same tokens, the same settings, count,
model and context version), the foreseen nodes join the tree as they are, KV included, so
nothing is computed again, and are announced as a generation's children are (``add``,
``done``): from then on they are the writer's branches like any other. Otherwise every
foresight is dropped and the caller generates as usual.

Foreseen nodes live in memory only: nothing about them is written to the session file until
they are taken, and closing the session drops them. A new round of foresight drops the
old one (``drop_foresight``); a cancelled foresight drops what it half wrote.

A part the :class:`~loomterm.engine.loom.facade.Loom` holds and delegates to; it owns
what is foreseen and reaches the Loom only through the public :class:`ForesightHost`
(the settings, the tree, the lock, the context), the change notices' ``emit``, the
models part's ``runner_of`` and the generation part's ``sampling``, all handed to it
when it is made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from loomterm.config.settings import DEFAULTS
from loomterm.engine.events import Event
from loomterm.engine.generation import GenerateRequest, GenerateResult
from loomterm.engine.loom.events import Emit
from loomterm.engine.loom.healing import healed
from loomterm.engine.loom.host import RequestHost
from loomterm.engine.loom.models import ModelWriter
from loomterm.errors import InputError, PrefillCancelled
from loomterm.tree import Node, Origin, Tree

if TYPE_CHECKING:
    from loomterm.config.settings import Settings
    from loomterm.engine.runner import Runner
    from loomterm.engine.sample.chain import SamplingParams


class ForesightHost(RequestHost, Protocol):
    """What foresight needs of the Loom: a request's host (``host.RequestHost``)."""


@dataclass(frozen=True, eq=False)
class Ask:
    """One generation request, as foresight matches it (``Loom.ask`` makes one).

    Attributes:
        node: Where the continuations start.
        n: How many siblings.
        settings: Every setting of the request (sampling, max_new_tokens, banned...).
        model: The attached model's key that generates.
        context: The context version asked for (None: the settings' own).
        path: ``node``'s path tokens when asked: a foresight made for other tokens (the
            node retyped since) does not match.
        approx: Whether the path's KV was approximate when asked.
    """

    node: Node
    n: int
    settings: Settings
    model: str
    context: str | None
    path: tuple[int, ...]
    approx: bool

    def matches(self, other: Ask) -> bool:
        """The same request: ``other``'s nodes are what this one would generate."""
        return (
            self.node is other.node
            and self.n == other.n
            and self.model == other.model
            and self.context == other.context
            and self.approx == other.approx
            and self.path == other.path
            and self.settings == other.settings
        )


@dataclass
class Foresight:
    """The nodes written for one :class:`Ask`.

    Attributes:
        ask: The request they answer.
        nodes: The children, out of sight (``Tree.foreseen``) until taken.
        result: What writing them did (timings: ``tokens_per_second``).
        made: When they were finished (``time.monotonic``).
    """

    ask: Ask
    nodes: list[Node]
    result: GenerateResult
    made: float = field(default_factory=time.monotonic)


class ForeseenWriter(ModelWriter):
    """A writer whose children are foreseen: out of sight, and announced to nobody."""

    def __init__(self, tree: Tree, meta: dict[str, Any]) -> None:
        super().__init__(tree, lambda event, node: None, meta)

    def new_child(self, parent: Node, sampling: dict[str, Any], seed: int | None) -> Node:
        child = self.tree.add_foreseen(
            parent, [], Origin.MODEL, sampling=sampling, seed=seed, meta=dict(self.meta)
        )
        self.children.append(child)
        return child


class LoomForesight:
    """Foresee a request out of sight, and take what was foreseen (module docstring)."""

    def __init__(
        self,
        loom: ForesightHost,
        emit: Emit,
        runner_of: Callable[[str], Runner],
        sampling: Callable[[Settings], SamplingParams],
    ) -> None:
        self.loom = loom
        self.emit = emit
        self.runner_of = runner_of  # an attached model's runner by key (one-line error)
        self.sampling = sampling  # the settings' sampling knobs (``LoomGeneration``)
        self._foresights: tuple[Foresight, ...] = ()  # replaced, never mutated

    def foresights(self) -> tuple[Foresight, ...]:
        """What is foreseen now, oldest first (safe to read from any thread)."""
        return self._foresights

    def ask(
        self,
        node: Node,
        n: int,
        settings: Settings | None = None,
        context: str | None = None,
        model: str | None = None,
    ) -> Ask:
        """The request ``generate(node, n=n, context=context, model=model)`` makes under
        ``settings`` (default: the loom's), as foresight matches it."""
        settings = self.loom.settings if settings is None else settings
        # How far ahead to think is no part of the request.
        settings = replace(
            settings,
            think_ahead=DEFAULTS.think_ahead,
            think_ahead_pause=DEFAULTS.think_ahead_pause,
        )
        with self.loom.lock:
            return Ask(
                node=node,
                n=n,
                settings=settings,
                model=self.loom.active_model if model is None else model,
                context=context,
                path=tuple(node.path_tokens()),
                approx=any(item.approx for item in node.path()),
            )

    @staticmethod
    def _would_heal(request: GenerateRequest, runner: Any) -> bool:
        """Whether a generation of ``request`` would heal the typed word it starts
        after (planned without touching the tree)."""
        planned = healed(request, runner, lambda node, length: node)
        return planned.heal is not None

    def foresee(self, ask: Ask, cancel: threading.Event | None = None) -> Foresight | None:
        """Write the nodes ``ask`` would generate, out of sight, and keep them beside
        what is foreseen already. Returns them, or None when ``cancel`` was set before
        they were whole (what was written is dropped) or the request cannot be made
        ahead (a context version not recorded yet would have to be recorded)."""
        settings = ask.settings
        with self.loom.lock:
            self.loom.check_node(ask.node)
            if ask.n < 1 or ask.node.end == 0:
                raise InputError("nothing to foresee: the path is empty or n < 1")
            runner = self.runner_of(ask.model)
            spec = self.loom.context_spec(ask.context)
        with self.loom.lock, runner.context(self.loom.assembly(ask.context)):
            if tuple(ask.node.path_tokens()) != ask.path:
                return None
            meta: dict[str, Any] = {"model": ask.model}
            if spec.active:
                meta["context"] = spec.version  # recorded when taken
            writer = ForeseenWriter(self.loom.tree, meta)
            request = GenerateRequest(
                node=ask.node,
                max_new_tokens=settings.max_new_tokens,
                n=ask.n,
                sampling=self.sampling(settings),
                drafting=settings.drafting,
                cancel=cancel,
                banned=settings.banned_strings,
                banned_ignore_case=settings.banned_strings_ignore_case,
                context=ask.context,
            )
            if self._would_heal(replace(request, healing=settings.token_healing), runner):
                # Healing backs up the typed word's tokens first: a change to the tree,
                # made only when the writer asks. The request then generates as usual.
                return None
            whole = False
            try:
                result = runner.decode(request, writer)
                whole = not request.cancelled and len(result.children) == ask.n
            except PrefillCancelled:
                return None
            finally:
                if not whole:
                    for kid in writer.children:
                        self.loom.tree.discard(kid)
            if not whole:
                return None
            foresight = Foresight(ask, list(result.children), result)
            self._foresights = (*self._foresights, foresight)
            return foresight

    def take_foresight(self, ask: Ask) -> Foresight | None:
        """The foresight for ``ask``, its nodes now the tree's own nodes (announced as a
        generation's children: ``add``, ``done``), or None when nothing foreseen
        matches. Either way nothing stays foreseen."""
        with self.loom.lock:
            found = next((f for f in self._foresights if f.ask.matches(ask)), None)
            if found is not None:
                node = found.ask.node
                if self.loom.tree.nodes.get(node.id) is not node or (
                    tuple(node.path_tokens()) != ask.path
                ):
                    found = None  # the node left the tree, or its tokens changed
            for other in self._foresights:
                if other is not found:
                    self._discard(other)
            self._foresights = ()
            if found is None:
                return None
            spec = self.loom.context_spec(ask.context)
            if spec.active:
                _, new = self.loom.contexts.versions.add(spec)
                if new:
                    self.emit(Event.CONTEXTS, None)
            now = time.time()
            for kid in found.nodes:
                kid.created = now  # joins the writer's tree now
                self.loom.tree.adopt(kid)
                self.emit(Event.ADD, kid)
            for kid in found.nodes:
                self.emit(Event.DONE, kid)
            return found

    def drop_foresight(self, keep: Sequence[Ask] = ()) -> None:
        """Drop the nodes foreseen (their KV with them), but those for an ask in
        ``keep``."""
        with self.loom.lock:
            kept = []
            for foresight in self._foresights:
                if any(foresight.ask.matches(ask) for ask in keep):
                    kept.append(foresight)
                else:
                    self._discard(foresight)
            self._foresights = tuple(kept)

    def _discard(self, foresight: Foresight) -> None:
        for kid in foresight.nodes:
            self.loom.tree.discard(kid)
