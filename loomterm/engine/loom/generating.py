"""Generating: ``generate`` merges the settings into one request, ``run`` runs it on a
model under the context it asks for, and the children are written and announced.

A part the :class:`~loomterm.engine.loom.facade.Loom` holds and delegates to; it owns
``last_result`` and reaches the Loom only through the public :class:`GenerationHost`
(the settings, the tree, the lock, the context), the change notices' ``emit`` and the
models part's ``runner_of``, all handed to it when it is made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from loomterm.engine.events import Event
from loomterm.engine.generation import GenerateRequest, GenerateResult, OnToken
from loomterm.engine.loom.events import Emit
from loomterm.engine.loom.healing import healed
from loomterm.engine.loom.host import RequestHost
from loomterm.engine.loom.models import ModelWriter
from loomterm.engine.sample.chain import SamplingParams, resolve_logit_bias
from loomterm.errors import InputError, PrefillCancelled

if TYPE_CHECKING:
    from loomterm.config.settings import Settings
    from loomterm.engine.runner import Runner
    from loomterm.tree import Node


class GenerationHost(RequestHost, Protocol):
    """What generating needs of the Loom: a request's host (``host.RequestHost``), and
    the text's tokens and the cut a healed word starts from."""

    def encode(self, text: str, at_start: bool = False) -> list[int]: ...

    def truncate(self, node: Node, length: int) -> Node: ...


class LoomGeneration:
    """``generate`` and ``run``, for the Loom (see the module docstring).

    Attributes:
        last_result: What the latest generation did (``generation.GenerateResult``).
    """

    def __init__(
        self, loom: GenerationHost, emit: Emit, runner_of: Callable[[str], Runner]
    ) -> None:
        self.loom = loom
        self.emit = emit
        self.runner_of = runner_of  # an attached model's runner by key (one-line error)
        self.last_result: GenerateResult | None = None

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
        settings = self.loom.settings.replace(**sampling)
        if max_new_tokens is None:
            max_new_tokens = settings.max_new_tokens
        if max_new_tokens < 0 or n < 1:
            raise InputError("max_new_tokens must be >= 0 and n >= 1")
        request = self._request(settings, node, max_new_tokens, n, seed=seed, context=context)
        request = replace(request, on_token=on_token, cancel=cancel, on_take_back=on_take_back)
        return self.run(request, model=model, meta=meta).children

    def _generate_each(
        self,
        node: Node,
        models: Sequence[tuple[str, int]] | dict[str, int],
        max_new_tokens: int | None,
        *,
        seed: int | None,
        cancel: threading.Event | None,
        **options: Any,
    ) -> list[Node]:
        """``generate(models=...)``: one batch per (model, count), in order."""
        plan = list(models.items()) if isinstance(models, dict) else list(models)
        if not plan or any(count < 0 for _name, count in plan):
            raise InputError("models: give (model, count) pairs with counts >= 0")
        kids: list[Node] = []
        for i, (name, count) in enumerate(plan):
            if count == 0 or (cancel is not None and cancel.is_set()):
                continue
            kids += self.generate(
                node,
                max_new_tokens,
                count,
                seed=None if seed is None else seed + i,
                cancel=cancel,
                model=name,
                **options,
            )
        return kids

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
            sampling=self.sampling(settings),
            seed=seed,
            drafting=settings.drafting,
            banned=settings.banned_strings,
            banned_ignore_case=settings.banned_strings_ignore_case,
            context=context,
            healing=settings.token_healing,
        )

    def sampling(self, settings: Settings) -> SamplingParams:
        """The settings' sampling knobs, with text in ``logit_bias`` turned into tokens."""
        knobs = settings.sampling()
        if knobs.get("logit_bias"):
            knobs["logit_bias"] = resolve_logit_bias(knobs["logit_bias"], self.loom.encode)
        return SamplingParams(**knobs)

    def run(
        self, request: GenerateRequest, model: str | None = None, meta: dict | None = None
    ) -> GenerateResult:
        """Run one generation request (with ``model``, an attached model; None: the
        active one); the result has the children and what it cost."""
        with self.loom.lock:
            key = self.loom.active_model if model is None else model
            runner = self.runner_of(key)
        with self.loom.lock, runner.context(self.loom.assembly(request.context)):
            self.loom.check_node(request.node)
            request = healed(request, runner, self.loom.truncate)  # typed word: backed up
            writer = ModelWriter(self.loom.tree, self.emit, {**(meta or {}), "model": key})
            if request.heal is not None:  # the first tokens spell the typed text again
                writer.meta["healed"] = request.heal.typed
            spec = self.loom.context_spec(request.context)
            if spec.active:  # the children record what they were generated with
                version, new = self.loom.contexts.versions.add(spec)
                writer.meta["context"] = version
                if new:
                    self.emit(Event.CONTEXTS, None)
            try:
                self.last_result = runner.decode(request, writer)
            except PrefillCancelled as stopped:  # before any token: no child was made
                stopped.node = request.node  # the tree is as it was
                raise stopped from None
            finally:
                for kid in writer.children:
                    self.emit(Event.DONE, kid)
            return self.last_result
