"""The Loom: a tree of token segments and the operations that extend and edit it.

Every operation returns nodes; none destroys one. The Loom keeps the tree, the
cursor, the settings and the change notices; a runner (``runner.Runner``) computes:
the local runner keeps each node's KV on the node and runs the model in this process.

The operations are the parts' (``editing``: truncate, splice, edit, retype;
``generating``; ``foresight``; ``models``; ``context``; ``tidy``), each made here with
what it needs; the Loom holds them and delegates, and owns the tree, the cursor, the
settings and the lock.

Several models can share the tree (``loom.models``); ``self.runner`` is the active one.

Thread safety: every tree operation and every read of the runner's state takes one
re-entrant lock (``exclusive``), so a UI may call from a worker thread while another
thread reads nodes. ``kv_bytes`` alone reads without waiting.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from loomterm.config.settings import Settings
from loomterm.engine.context import Assembled, Assembly, ContextBook
from loomterm.engine.events import Event
from loomterm.engine.generation import GenerateRequest, GenerateResult
from loomterm.engine.kv.resident import KVBytes
from loomterm.engine.loom.context import LoomContext
from loomterm.engine.loom.editing import LoomEdits
from loomterm.engine.loom.events import EventBus, Listener
from loomterm.engine.loom.foresight import Ask, Foresight, LoomForesight
from loomterm.engine.loom.generating import LoomGeneration
from loomterm.engine.loom.models import LoomModels
from loomterm.engine.loom.registry import Models
from loomterm.engine.loom.tidy import LoomTidy
from loomterm.engine.runner import Capabilities, Runner
from loomterm.engine.text import TokenText
from loomterm.errors import InputError
from loomterm.tree import Merged, Node, Origin, Tree

if TYPE_CHECKING:
    from loomterm.config.injection import ContextSpec
    from loomterm.engine.models.load import LoadedModel
    from loomterm.engine.runner import Progress


class Loom:
    """A session's tree and the runner that extends it. See the module docstring.

    Attributes:
        runner: What computes (``runner.Runner``).
        tree: Every node ever made (``loomterm.tree.Tree``).
        settings: The validated session settings (``loomterm.config.settings.Settings``).
        last_result: What the latest generation did (``generation.GenerateResult``).
        contexts: The context versions (memory, author's note, world info) nodes were
            generated with (``engine.context.ContextBook``; ``.versions`` by id).
    """

    def __init__(self, runner: Runner, tree: Tree | None = None) -> None:
        self.tree = tree or Tree()
        self.settings = Settings()
        self._events = EventBus(hidden=self.is_foreseen)  # foreseen nodes stay out of sight
        self._lock = threading.RLock()
        self._cursor = self.tree.root
        self._models = LoomModels(self, Models(runner), self._events.emit)
        self._tidy = LoomTidy(self)
        if runner.capabilities.node_kv:
            from loomterm.engine.kv.cache import split_kv

            self.tree.split_kv = split_kv
        runner.attach(self.tree, self._events.emit)
        self.contexts = ContextBook(runner.encode, runner.codec.decode)
        self._context = LoomContext(self, self.contexts)
        self._edits = LoomEdits(self, self._events.emit, self._context.hold_moved)
        runner_of = self._models.registry.runner
        self._generation = LoomGeneration(self, self._events.emit, runner_of)
        self._foresight = LoomForesight(
            self, self._events.emit, runner_of, self._generation.sampling
        )

    @classmethod
    def load(
        cls,
        model: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        n_ctx: int | None = None,
        progress: Progress | None = None,
        kv_budget: int | str | None = None,
        quant: str | None = "none",
        backend: str = "auto",
        threads: int | None = None,
        **server: Any,
    ) -> Loom:
        """Load a model (None: the default model; a URL: connect to that server) and
        start an empty loom on it. The road from ``model`` to a runner is
        ``engine.open``, whose module docstring says what each option does
        (``backend``, ``threads``, ``quant``, ``kv_budget``...; ``server``: the
        options of ``remote.connect``)."""
        from loomterm.engine.open import RunnerOptions, open_runner

        options = RunnerOptions.of(
            backend=backend,
            threads=threads,
            device=device,
            dtype=dtype,
            quant=quant,
            n_ctx=n_ctx,
            kv_budget=kv_budget,
            **server,
        )
        return cls(open_runner(model, options, progress))

    @classmethod
    def from_loaded(
        cls,
        loaded: LoadedModel,
        n_ctx: int | None = None,
        tree: Tree | None = None,
        kv_budget: int | str | None = None,
    ) -> Loom:
        """A loom on an already loaded model, optionally over an existing tree."""
        from loomterm.engine.local.runner import LocalRunner

        return cls(LocalRunner(loaded, n_ctx=n_ctx, kv_budget=kv_budget), tree=tree)

    # -- models (``models.LoomModels``) ----------------------------------------------
    @property
    def runner(self) -> Runner:
        """What computes: the active model's runner (``use`` changes it)."""
        return self._models.runner

    @property
    def models(self) -> dict[str, Runner]:
        """The attached models' runners by key, in the order they joined."""
        return self._models.registry.runners()

    @property
    def model_table(self) -> dict[str, dict[str, Any]]:
        """``LoomModels.model_table``: every model that wrote or may write here."""
        return self._models.model_table

    @property
    def active_model(self) -> str:
        """The key of the model that operations use (``use`` changes it)."""
        return self._models.registry.active

    @property
    def kv_owner(self) -> str | None:
        """The key of the local model whose KV is kept on the nodes, or None."""
        return self._models.registry.kv_owner

    @property
    def model_state(self) -> dict[str, Any]:
        """``LoomModels.model_state``: which models were attached, which was active."""
        return self._models.model_state

    @property
    def model_notes(self) -> dict[str, str]:
        """Key to why, for each recorded model that ``reopen_models`` could not reopen."""
        return self._models.model_notes

    def kv_bytes(self) -> KVBytes:
        """``LoomModels.kv_bytes``: resident KV; safe from any thread without waiting."""
        return self._models.kv_bytes()

    def evict(self, node: Node) -> None:
        """Drop ``node``'s KV, keeping its tokens; it is recomputed exactly when used."""
        self._models.evict(node)

    def attach(self, name: str | None, runner: Runner) -> str:
        """``LoomModels.attach``: add ``runner`` as a model; returns its key."""
        return self._models.attach(name, runner)

    def open_model(
        self, source: str, name: str | None = None, device: str = "auto", **options: Any
    ) -> str:
        """``LoomModels.open_model``: load or connect to ``source`` and attach it; the
        ``options`` are its keyword-only ones (``dtype``, ``quant``, ``backend``,
        ``threads``, ``n_ctx``, ``kv_budget``, ``progress``, ``record``, server's)."""
        return self._models.open_model(source, name, device, **options)

    functools.update_wrapper(open_model, LoomModels.open_model, assigned=(), updated=())

    def reopen_models(
        self,
        keys: Sequence[str] | None = None,
        progress: Callable[..., None] | None = None,
        on_note: Callable[[str], None] | None = None,
        loaded: Sequence[Any] = (),
        threads: int | None = None,
    ) -> list[str]:
        """``LoomModels.reopen_models``: attach the recorded models again."""
        return self._models.reopen_models(keys, progress, on_note, loaded, threads)

    def use(self, name: str) -> Runner:
        """Make the attached model ``name`` the active one; returns its runner."""
        return self._models.use(name)

    def detach(self, name: str) -> None:
        """``LoomModels.detach``: close and drop the attached model ``name``."""
        self._models.detach(name)

    def adopt_models(
        self, table: dict[str, dict[str, Any]], state: dict[str, Any] | None = None
    ) -> None:
        """``LoomModels.adopt_models``: take in a session file's model table."""
        self._models.adopt_models(table, state)

    # -- what the runner is ------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return self.runner.capabilities

    @property
    def codec(self) -> TokenText:
        return self.runner.codec

    @property
    def n_ctx(self) -> int:
        return self.runner.n_ctx

    @property
    def eos_ids(self) -> frozenset[int]:
        return self.runner.eos_ids

    @property
    def progress(self) -> Progress | None:
        return self.runner.progress

    @progress.setter
    def progress(self, progress: Progress | None) -> None:
        self.runner.progress = progress

    @property
    def interrupt(self) -> threading.Event | None:
        """Set it to stop a long prefill between two chunks: the operation raises
        :class:`~loomterm.errors.PrefillCancelled`, leaving the tree whole (an edit or
        append in it entire, as ``error.node``). Cleared by whoever set it."""
        return self.runner.interrupt

    @interrupt.setter
    def interrupt(self, event: threading.Event | None) -> None:
        self.runner.interrupt = event

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the engine: no operation runs, and no change slips by, inside."""
        with self._lock, self.runner.context(self.assembly()):
            yield

    @property
    def lock(self) -> threading.RLock:
        """The re-entrant lock every tree operation holds (``exclusive`` takes the
        runner's context too)."""
        return self._lock

    # -- what the model sees (``context.LoomContext``) -------------------------------
    def context_spec(self, version: str | None = None) -> ContextSpec:
        """``LoomContext.context_spec``: the settings' context (None) or a version's."""
        return self._context.context_spec(version)

    def context_version(self, node: Node) -> str:
        """``LoomContext.context_version``: the version ``node`` was generated with."""
        return self._context.context_version(node)

    def assembly(self, version: str | None = None) -> Assembly:
        """``LoomContext.assembly``: what a runner is handed with each operation."""
        return self._context.assembly(version)

    def context_layout(self, node: Node, version: str | None = None) -> Assembled:
        """``LoomContext.context_layout``: what the model sees, in runs."""
        return self._context.context_layout(node, version)

    def context_tokens(self, node: Node, version: str | None = None) -> list[int]:
        """``LoomContext.context_tokens``: the exact ids the model sees for ``node``."""
        return self._context.context_tokens(node, version)

    # -- events ----------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(event, node)`` on every change (``events`` lists them)."""
        self._events.subscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self._events.unsubscribe(listener)

    def notify(self, event: Event, node: Node | None) -> None:
        """Announce a change made to a node from outside the engine."""
        self._events.emit(event, node)

    # -- reading ---------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return self.tree.root

    @property
    def cursor(self) -> Node:
        """The node the user is at; saved with the session."""
        return self._cursor

    @cursor.setter
    def cursor(self, node: Node) -> None:
        with self._lock:
            self.check_node(node)
            self._cursor = node
            self._events.emit(Event.CURSOR, node)

    def set_meta(self, node: Node, **changes: Any) -> None:
        """Change ``node.meta`` (bookmark, hidden, role...) and tell the listeners, so
        the session file saves it. A value of None removes the key."""
        with self._lock:
            self.check_node(node)
            for key, value in changes.items():
                if value is None:
                    node.meta.pop(key, None)
                else:
                    node.meta[key] = value
            self._events.emit(Event.UPDATE, node)

    def update_settings(self, **changes: Any) -> None:
        """Change settings; an unknown name or a bad value raises a one-line error and
        changes nothing (``loomterm.config.settings``)."""
        with self._lock:
            self.settings = self.settings.replace(**changes)
            self._context.settings_changed()
            self._events.emit(Event.SETTINGS, None)

    def tokens(self, node: Node) -> list[int]:
        """Token ids of the path from the root to ``node``."""
        return node.path_tokens()

    def text(self, node: Node) -> str:
        """Text of the path from the root to ``node``."""
        return self.codec.decode(node.path_tokens())

    def encode(self, text: str, at_start: bool = False) -> list[int]:
        """Token ids for ``text``; special tokens written out (``<|im_start|>``) become
        those tokens. ``at_start`` lets the tokenizer add its start-of-text token."""
        return self.runner.encode(text, at_start)

    def decode(self, tokens: list[int]) -> str:
        return self.codec.decode(tokens)

    def token_pieces(self, tokens: list[int]) -> list[str]:
        """Display text per token; joined, they equal ``decode(tokens)``."""
        return self.codec.pieces(tokens)

    def is_exact(self, node: Node) -> bool:
        """True when no KV on the path was re-rotated (or built on re-rotated KV)."""
        return not any(n.approx for n in node.path())

    def next_logits(self, node: Node) -> torch.Tensor:
        """(vocab,) float32 logits for the token after ``node``'s path."""
        if not self.capabilities.full_logits:
            raise InputError(f"{self.runner.name} does not give next-token logits")
        with self.exclusive():
            self.check_node(node)
            return self.runner.prepare(node).float().clone()

    # -- structure -------------------------------------------------------------------
    def check_node(self, node: Node) -> None:
        """Raise ``InputError`` unless ``node`` is in this loom's tree."""
        if self.tree.nodes.get(node.id) is not node:
            raise InputError("that node does not belong to this loom")

    # -- tidying (``tidy.LoomTidy``) -------------------------------------------------
    def split(self, node: Node, offset: int) -> Node:
        """``LoomTidy.split``: cut ``node`` after its first ``offset`` tokens."""
        return self._tidy.split(node, offset)

    def merge(self, node: Node) -> Merged:
        """``LoomTidy.merge``: fold ``node``'s parent into ``node``."""
        return self._tidy.merge(node)

    def unmerge(self, record: Merged) -> Node:
        """``LoomTidy.unmerge``: undo a merge."""
        return self._tidy.unmerge(record)

    def move(self, node: Node, new_parent: Node, index: int | None = None) -> tuple[Node, int]:
        """``LoomTidy.move``: make ``node``'s branch a child of ``new_parent``."""
        return self._tidy.move(node, new_parent, index)

    # -- editing (``editing.LoomEdits``) ---------------------------------------------
    def truncate(self, node: Node, length: int) -> Node:
        """``LoomEdits.truncate``: the node whose path is ``node``'s first ``length``
        tokens (splits a node if needed; runs no forward pass)."""
        return self._edits.truncate(node, length)

    def append(self, node: Node, text: str, origin: Origin = Origin.USER, **meta: Any) -> Node:
        """``LoomEdits.append``: a new child of ``node`` holding ``text``'s tokens."""
        return self._edits.append(node, text, origin, **meta)

    def append_tokens(
        self, node: Node, tokens: list[int], origin: Origin = Origin.USER, **meta: Any
    ) -> Node:
        """``LoomEdits.append_tokens``: like ``append``, for token ids."""
        return self._edits.append_tokens(node, tokens, origin, **meta)

    def pick(self, node: Node, position: int, token_id: int) -> Node:
        """``LoomEdits.pick``: a branch where ``position`` holds ``token_id``."""
        return self._edits.pick(node, position, token_id)

    def splice(self, node: Node, start: int, end: int, text: str, exact: bool = False) -> Node:
        """``LoomEdits.splice``: path tokens ``[start, end)`` replaced with ``text``'s."""
        return self._edits.splice(node, start, end, text, exact)

    def splice_tokens(
        self, node: Node, start: int, end: int, tokens: list[int], exact: bool = False
    ) -> Node:
        """``LoomEdits.splice_tokens``: ``splice`` with token ids."""
        return self._edits.splice_tokens(node, start, end, tokens, exact)

    def edit(self, node: Node, new_text: str, exact: bool = False) -> Node:
        """``LoomEdits.edit``: the path's whole text changed to ``new_text``, as the
        smallest splice."""
        return self._edits.edit(node, new_text, exact)

    def retype(
        self, node: Node, new_text: str, exact: bool = False, run: Collection[int] = ()
    ) -> Node | None:
        """``LoomEdits.retype``: the change made in place inside one node the writer is
        writing, or None (then ``edit`` branches)."""
        return self._edits.retype(node, new_text, exact, run)

    def refresh(self, node: Node) -> Node:
        """``LoomModels.refresh``: recompute, exactly, the path's approximate KV."""
        return self._models.refresh(node)

    # -- generation (``generating.LoomGeneration``) ---------------------------------
    @property
    def last_result(self) -> GenerateResult | None:
        """What the latest generation did (``generation.GenerateResult``)."""
        return self._generation.last_result

    def generate(
        self, node: Node, max_new_tokens: int | None = None, n: int = 1, **options: Any
    ) -> list[Node]:
        """``LoomGeneration.generate``: sample ``n`` continuations of ``node`` as one
        batch; returns the new children. The ``options`` are its keyword-only ones
        (``seed``, ``on_token``, ``cancel``, ``model``, ``models``, ``meta``,
        ``context``...) and any setting."""
        return self._generation.generate(node, max_new_tokens, n, **options)

    # ``help()`` and ``inspect.signature`` show the part's full parameters.
    functools.update_wrapper(generate, LoomGeneration.generate, assigned=(), updated=())

    def run(
        self, request: GenerateRequest, model: str | None = None, meta: dict | None = None
    ) -> GenerateResult:
        """``LoomGeneration.run``: run one generation request (``model``: an attached
        model; None: the active one)."""
        return self._generation.run(request, model, meta)

    # -- foresight (``foresight.LoomForesight``) -------------------------------------
    def is_foreseen(self, node: Node) -> bool:
        """True for a node written ahead and not taken (the event bus hides it)."""
        return self.tree.is_foreseen(node)

    def foresights(self) -> tuple[Foresight, ...]:
        """What is foreseen now, oldest first (safe to read from any thread)."""
        return self._foresight.foresights()

    def ask(
        self,
        node: Node,
        n: int,
        settings: Settings | None = None,
        context: str | None = None,
        model: str | None = None,
    ) -> Ask:
        """``LoomForesight.ask``: the request ``generate`` would make, as foresight
        matches it."""
        return self._foresight.ask(node, n, settings, context, model)

    def foresee(self, ask: Ask, cancel: threading.Event | None = None) -> Foresight | None:
        """``LoomForesight.foresee``: write what ``ask`` would generate, out of sight."""
        return self._foresight.foresee(ask, cancel)

    def take_foresight(self, ask: Ask) -> list[Node] | None:
        """``LoomForesight.take_foresight``: the nodes foreseen for ``ask``, now the
        tree's own, or None. Either way nothing stays foreseen."""
        with self._lock:
            found = self._foresight.take_foresight(ask)
            if found is None:
                return None
            self._generation.last_result = found.result
            return list(found.nodes)

    def drop_foresight(self, keep: Sequence[Ask] = ()) -> None:
        """Drop the nodes foreseen, but those for an ask in ``keep``."""
        self._foresight.drop_foresight(keep)
