"""The Loom: a tree of token segments and the operations that extend and edit it.

Every operation returns nodes; none destroys one. The Loom keeps the tree, the
cursor, the settings and the change notices; a runner (``runner.Runner``) computes:
the local runner keeps each node's KV on the node and runs the model in this process.

- ``truncate`` moves the end back. It splits a node when the cut falls inside it, the
  halves sharing one KV storage; it computes nothing until logits are asked for.
- ``splice`` replaces a token range. Fast mode (runners with the ``rerope``
  capability) copies the suffix with its keys re-rotated to the new positions, marks
  it approximate and computes only the inserted tokens; exact mode recomputes it.
- ``generate`` samples ``n`` continuations, as one batch over one shared prefix.
- ``edit`` turns a whole-text change into the smallest token splice (``edits``).

Several models can share the tree (``loom.models``); ``self.runner`` is the active one.

Thread safety: every tree operation and every read of the runner's state takes one
re-entrant lock (``exclusive``), so a UI may call from a worker thread while another
thread reads nodes. ``kv_bytes`` alone reads without waiting.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from loomterm.config.settings import Settings
from loomterm.engine.context import Assembled, Assembly, ContextBook
from loomterm.engine.events import Event
from loomterm.engine.generation import GenerateRequest, GenerateResult, OnToken
from loomterm.engine.kv.window import segments
from loomterm.engine.loom.context import LoomContext
from loomterm.engine.loom.edits import in_run, plan_edit, plan_retype
from loomterm.engine.loom.events import EventBus, Listener
from loomterm.engine.loom.foresight import LoomForesight
from loomterm.engine.loom.healing import healed
from loomterm.engine.loom.models import LoomModels, ModelWriter
from loomterm.engine.loom.registry import Models
from loomterm.engine.loom.tidy import LoomTidy
from loomterm.engine.runner import Capabilities, Runner
from loomterm.engine.sample.chain import SamplingParams, resolve_logit_bias
from loomterm.engine.text import TokenText
from loomterm.errors import EditRangeError, EmptyEditError, InputError, PrefillCancelled
from loomterm.tree import Merged, Node, Origin, Tree

if TYPE_CHECKING:
    from loomterm.config.injection import ContextSpec
    from loomterm.engine.models.load import LoadedModel
    from loomterm.engine.runner import Progress


class Loom(LoomModels, LoomForesight):
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
        self.runner = runner
        self.tree = tree or Tree()
        self.settings = Settings()
        self.last_result: GenerateResult | None = None
        self._events = EventBus(hidden=self.is_foreseen)  # foreseen nodes stay out of sight
        self._lock = threading.RLock()
        self._cursor = self.tree.root
        self._models = Models(runner)
        self._tidy = LoomTidy(self)
        if runner.capabilities.node_kv:
            from loomterm.engine.kv.cache import split_kv

            self.tree.split_kv = split_kv
        runner.attach(self.tree, self._events.emit)
        self.contexts = ContextBook(runner.encode, runner.codec.decode)
        self._context = LoomContext(self, self.contexts)

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
        """Load a model (None: the default model) and start an empty loom on it.
        ``kv_budget`` caps resident KV ("2G", bytes; default: half the free memory);
        ``quant="f16"``, ``"int8"`` or ``"int4"`` quantizes the weights
        (``engine.kernels.quant``).

        ``backend``: ``"torch"`` (the local runner: transformers in this process),
        ``"llama.cpp"`` (a ``.gguf`` file run by llama.cpp in this process,
        ``engine.llamacpp``) or ``"auto"`` (a ``.gguf`` file on llama.cpp when it is
        built here, anything else on torch; a URL connects to the server).
        ``threads``: CPU threads for either (default: ``engine.threads.default_threads``).

        A ``model`` that is a URL (``http://host:port``) connects to that server
        instead (``remote.connect``; ``server`` takes its options: ``server_kind``,
        ``server_model``, ``tokenizer``, timeouts); ``device``, ``dtype``, ``quant``,
        ``n_ctx`` and ``kv_budget`` are the server's business then. The road from
        ``model`` to a runner is ``engine.open`` (every other opener takes it too)."""
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

    def _prepare(self, node: Node) -> PrefillCancelled | None:
        """``runner.prepare(node)``; a stopped prefill is returned, not raised."""
        try:
            self.runner.prepare(node)
        except PrefillCancelled as stopped:
            return stopped
        return None

    @staticmethod
    def _stopped(error: PrefillCancelled, node: Node) -> PrefillCancelled:
        error.node = node
        return error

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

    _check_node = check_node

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

    def _check_tokens(self, tokens: list[int]) -> None:
        bad = [t for t in tokens if not 0 <= int(t) < self.runner.vocab_size]
        if bad:
            raise InputError(
                f"token id {bad[0]} is outside the vocabulary (0..{self.runner.vocab_size - 1})"
            )

    def _add(self, parent: Node, tokens: list[int], origin: Origin, **fields: Any) -> Node:
        child = self.tree.add(parent, tokens, origin, **fields)
        self._events.emit(Event.ADD, child)
        return child

    def truncate(self, node: Node, length: int) -> Node:
        """The node whose path is the first ``length`` tokens of ``node``'s path.
        Splits a node if needed; runs no forward pass."""
        with self.exclusive():
            self.check_node(node)
            total = node.end
            if not 0 <= length <= total:
                raise EditRangeError(f"length {length} is outside the path (0..{total})")
            if length == total:
                return node
            if length == 0:
                return self.root
            holder, offset = self.tree.locate(node, length - 1)
            if offset == len(holder.tokens) - 1:
                return holder
            head = self.tree.split(holder, offset + 1)
            for runner in self._each_runner():
                runner.split(head, holder, offset + 1)
            self._events.emit(Event.SPLIT, head)
            return head

    def append(self, node: Node, text: str, origin: Origin = Origin.USER, **meta: Any) -> Node:
        """A new child of ``node`` holding ``text``'s tokens, with its KV computed."""
        with self.exclusive():
            self.check_node(node)
            tokens = self.encode(text, at_start=node.end == 0)
            if not tokens:
                raise EmptyEditError("nothing to append: the text is empty")
            return self.append_tokens(node, tokens, origin, **meta)

    def append_tokens(
        self, node: Node, tokens: list[int], origin: Origin = Origin.USER, **meta: Any
    ) -> Node:
        """Like ``append``, for token ids."""
        with self.exclusive():
            self.check_node(node)
            self._check_tokens(tokens)
            child = self._add(node, list(tokens), origin, meta=dict(meta))
            stopped = self._prepare(child)
            if stopped is not None:
                raise self._stopped(stopped, child)
            return child

    def pick(self, node: Node, position: int, token_id: int) -> Node:
        """A branch where path position ``position`` holds ``token_id`` (an alternative
        from the top list) and nothing follows. Costs no forward pass; an existing
        branch with that token is reused."""
        with self.exclusive():
            self.check_node(node)
            if not 0 <= position < node.end:
                raise EditRangeError(f"position {position} is outside the path (0..{node.end - 1})")
            self._check_tokens([token_id])
            holder, offset = self.tree.locate(node, position)
            alternatives = holder.top[offset] or []
            prefix = self.truncate(node, position)
            for child in prefix.children:
                if child.tokens and child.tokens[0] == token_id:
                    return self.truncate(child, position + 1)
            logprob = next((lp for t, lp in alternatives if t == token_id), None)
            return self._add(
                prefix,
                [token_id],
                Origin.MODEL,
                logprobs=[logprob],
                top=[alternatives or None],
                meta={"picked": True, "model": holder.meta.get("model") or self.active_model},
            )

    # -- splicing --------------------------------------------------------------------
    def splice(self, node: Node, start: int, end: int, text: str, exact: bool = False) -> Node:
        """Replace path tokens ``[start, end)`` with ``text``'s tokens, on a new branch."""
        with self.exclusive():
            self.check_node(node)
            return self.splice_tokens(node, start, end, self.encode(text), exact)

    def splice_tokens(
        self, node: Node, start: int, end: int, tokens: list[int], exact: bool = False
    ) -> Node:
        """``splice`` with token ids. Returns the new branch's last node.

        Fast (``exact=False``) only where the runner can move cached keys, the suffix's
        KV is all stored and the result fits the context window; otherwise exact."""
        with self.exclusive():
            self.check_node(node)
            total = node.end
            if not 0 <= start <= end <= total:
                raise EditRangeError(f"range {start}..{end} is outside the path (0..{total})")
            self._check_tokens(tokens)
            if start == end and not tokens:
                raise EmptyEditError("empty edit: nothing removed and nothing inserted")
            if node.path_tokens()[start:end] == list(tokens):
                return node
            prefix = self.truncate(node, start)
            # After the truncate: it may have split a node that the suffix starts in.
            suffix = segments(node, end, total)
            tail = self._add(prefix, list(tokens), Origin.EDIT) if tokens else prefix
            fast = (
                not exact
                and self.capabilities.rerope
                and start + len(tokens) + (total - end) <= self.n_ctx
            )
            movable = fast and self.runner.can_move(suffix)
            # Under memory, world info or a note: the buffer's suffix columns are moved.
            held = fast and self._context.hold_moved(suffix, start + len(tokens))
            fast = movable or held
            delta = len(tokens) - (end - start)
            stopped = None  # a stopped prefill: the branch is still made whole
            if tokens and fast and not held:
                stopped = self._prepare(tail)  # the inserted tokens are computed, exactly
            for source, lo, hi in suffix:
                # Exact: the suffix is computed again in its new context, and its records
                # with it. Fast: its KV (and so its records) is the old context's, moved.
                copy = self.tree.add(
                    tail,
                    source.tokens[lo:hi],
                    source.origin,
                    logprobs=source.logprobs[lo:hi] if fast else None,
                    top=source.top[lo:hi] if fast else None,
                    sampling=source.sampling,
                    seed=source.seed,
                    meta={k: v for k, v in source.meta.items() if k in ("role", "model")},
                )
                if fast:
                    if movable:
                        copy.kv = self.runner.moved_kv(source, lo, hi, delta)
                    copy.approx = True
                self._events.emit(Event.ADD, copy)
                tail = copy
            if tail.end and stopped is None:
                stopped = self._prepare(tail)
            if stopped is not None:
                raise self._stopped(stopped, tail)
            return tail

    def edit(self, node: Node, new_text: str, exact: bool = False) -> Node:
        """The path's whole text changed to ``new_text``: re-tokenize the changed region
        and splice only the tokens between the longest common token prefix and suffix."""
        with self.exclusive():
            self.check_node(node)
            if not isinstance(new_text, str):
                raise InputError("text must be a string")
            start, end, inserted = plan_edit(
                self.codec,
                lambda text: self.encode(text),
                node.path_tokens(),
                new_text,
                stops=self.eos_ids,
            )
            return self.splice_tokens(node, start, end, inserted, exact)

    def retype(
        self, node: Node, new_text: str, exact: bool = False, run: Collection[int] = ()
    ) -> Node | None:
        """The path's text changed to ``new_text`` inside the text of one node the writer
        is writing: that node's tokens change in place, and no branch is made. Returns
        ``node``, or None when the change is not of that kind (then ``edit`` branches).

        The node is ``node`` itself when the writer wrote it (origin user or edit) and it
        has no children, or a node of ``run`` (the ids of nodes the current typing run
        made) whose nodes below on the path are all the run's: they keep their tokens
        and move with the change (their KV re-rotated, or recomputed when ``exact``).
        Only the changed node's tokens from the change on are computed (next-token
        logits included), as an append of them would; an ``rewrite`` event tells the
        session file."""
        with self.exclusive():
            self.check_node(node)
            if not isinstance(new_text, str):
                raise InputError("text must be a string")
            path = node.path()[1:]
            plan = plan_retype(
                self.codec,
                lambda text, first: self.encode(text, at_start=first),
                path,
                new_text,
                in_run(path, run),
            )
            if plan is None:
                return None
            self._check_tokens(plan.tokens)
            target, below = path[plan.index], path[plan.index + 1 :]
            delta = len(plan.tokens) - len(target.tokens)
            # The nodes below read other text now: moved (re-roped by ``delta``, flagged
            # approximate, as a fast splice's suffix is) or computed again.
            moved = (
                not exact
                and self.capabilities.rerope
                and node.end + delta <= self.n_ctx
                and self.runner.can_move([(item, 0, len(item.tokens)) for item in below])
            )
            for item in below:  # before the target's columns go: their KV may alias them
                self._shift(item, delta, moved)
            for runner in self._each_runner():
                runner.rewrite(target, plan.keep)
            keep = plan.keep
            target.tokens = list(plan.tokens)
            target.logprobs = target.logprobs[:keep] + [None] * (len(plan.tokens) - keep)
            target.top = target.top[:keep] + [None] * (len(plan.tokens) - keep)
            self._events.emit(Event.REWRITE, target)
            for item in below:  # moved: a flag changed; recomputed: records cleared
                self._events.emit(Event.UPDATE if moved else "rewrite", item)
            stopped = self._prepare(node)
            if stopped is not None:
                raise self._stopped(stopped, node)
            return node

    def _shift(self, item: Node, delta: int, moved: bool) -> None:
        """``item`` follows a retyped node: its KV re-roped by ``delta`` and flagged
        approximate (``moved``), else dropped with its records, to be computed again."""
        if moved:
            if delta:
                item.kv = self.runner.moved_kv(item, 0, len(item.tokens), delta)
            item.approx = True
        else:
            item.kv = None
            item.logprobs = [None] * len(item.tokens)
            item.top = [None] * len(item.tokens)

    def refresh(self, node: Node) -> Node:
        """Recompute, exactly, the KV of every approximate node on the path (and of
        everything after the first one). Returns ``node``."""
        with self.exclusive():
            self.check_node(node)
            owner = self._kv_runner()
            if owner is not None:
                with owner.context(self.assembly()):  # every model sees one context
                    owner.refresh(node)
            if owner is not self.runner:
                self.runner.refresh(node)
            return node

    # -- generation ------------------------------------------------------------------
    def generate(
        self,
        node: Node,
        max_new_tokens: int | None = None,
        n: int = 1,
        *,
        seed: int | None = None,
        on_token: OnToken | None = None,
        cancel: threading.Event | None = None,
        drafting: str | None = None,
        on_take_back: Callable[[Node, int], None] | None = None,
        model: str | None = None,
        models: Sequence[tuple[str, int]] | dict[str, int] | None = None,
        meta: dict[str, Any] | None = None,
        context: str | None = None,
        **sampling: Any,
    ) -> list[Node]:
        """Sample ``n`` continuations of ``node`` as one batch; returns the new children.

        Every setting (the samplers by llama.cpp's names, ``banned_strings``,
        ``drafting``...) may be given; what is not given comes from ``loom.settings``.
        ``on_token(child, token_id, piece)`` is called as each token arrives; setting
        ``cancel`` stops within one token, keeping what was generated.

        ``model`` names an attached model to generate with (None: the active one).
        ``models`` asks several: ``[(name, count), ...]`` (or a dict), one batch per
        entry in that order, ``n`` and ``model`` unused; a ``seed`` then goes up by one
        per entry. ``meta`` is added to every new child's ``meta``.
        ``context``: a recorded context version (``context_version(old_node)``) instead
        of the settings' memory, author's note and world info ("" for none).
        """
        if models is not None:
            return self._generate_each(
                node,
                models,
                max_new_tokens,
                seed=seed,
                on_token=on_token,
                cancel=cancel,
                drafting=drafting,
                on_take_back=on_take_back,
                meta=meta,
                context=context,
                **sampling,
            )
        if drafting is not None:
            sampling["drafting"] = drafting
        settings = self.settings.replace(**sampling)
        if max_new_tokens is None:
            max_new_tokens = settings.max_new_tokens
        if max_new_tokens < 0 or n < 1:
            raise InputError("max_new_tokens must be >= 0 and n >= 1")
        request = self._request(settings, node, max_new_tokens, n, seed=seed, context=context)
        request = replace(request, on_token=on_token, cancel=cancel, on_take_back=on_take_back)
        return self.run(request, model=model, meta=meta).children

    def _request(
        self,
        settings: Settings,
        node: Node,
        max_new_tokens: int,
        n: int,
        seed: int | None,
        context: str | None,
    ) -> GenerateRequest:
        """One ``GenerateRequest`` from the merged ``settings`` (no callbacks yet)."""
        return GenerateRequest(
            node=node,
            max_new_tokens=max_new_tokens,
            n=n,
            sampling=self._sampling(settings),
            seed=seed,
            drafting=settings.drafting,
            banned=settings.banned_strings,
            banned_ignore_case=settings.banned_strings_ignore_case,
            context=context,
            healing=settings.token_healing,
        )

    def _sampling(self, settings: Settings) -> SamplingParams:
        """The settings' sampling knobs, with text in ``logit_bias`` turned into tokens."""
        knobs = settings.sampling()
        if knobs.get("logit_bias"):
            knobs["logit_bias"] = resolve_logit_bias(knobs["logit_bias"], self.encode)
        return SamplingParams(**knobs)

    def run(
        self, request: GenerateRequest, model: str | None = None, meta: dict | None = None
    ) -> GenerateResult:
        """Run one generation request (with ``model``, an attached model; None: the
        active one); the result has the children and what it cost."""
        with self._lock:
            key = self.active_model if model is None else model
            runner = self._models.runner(key)
        with self._lock, runner.context(self.assembly(request.context)):
            self.check_node(request.node)
            request = healed(request, runner, self.truncate)  # typed word: backed up
            writer = ModelWriter(self.tree, self._events.emit, {**(meta or {}), "model": key})
            if request.heal is not None:  # the first tokens spell the typed text again
                writer.meta["healed"] = request.heal.typed
            spec = self.context_spec(request.context)
            if spec.active:  # the children record what they were generated with
                version, new = self.contexts.versions.add(spec)
                writer.meta["context"] = version
                if new:
                    self._events.emit(Event.CONTEXTS, None)
            try:
                self.last_result = runner.decode(request, writer)
            except PrefillCancelled as stopped:  # before any token: no child was made
                raise self._stopped(stopped, request.node) from None
            finally:
                for kid in writer.children:
                    self._events.emit(Event.DONE, kid)
            return self.last_result
