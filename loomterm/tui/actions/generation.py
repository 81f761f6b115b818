"""Generation: generate, generate N siblings, regenerate, stop, recompute exactly, and
streaming the tokens onto the screen as they come.

A generation is one job on the engine worker (``LoomApp.submit``): it first hands the
engine any typed text and cuts the path at the caret, then generates, reporting through
:class:`Streamer` (batched :class:`~loomterm.tui.messages.TokensStreamed`) and one
:class:`~loomterm.tui.messages.GenerationDone`. ``generating`` (a reactive on the app)
is True from the request until ``GenerationDone``; esc sets the app's cancel event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from loomterm.errors import LoomError, PrefillCancelled
from loomterm.tree import Node, Origin
from loomterm.tui import ops
from loomterm.tui.actions.context import ContextAssembled
from loomterm.tui.messages import (
    GenerationDone,
    GenerationStarted,
    Moved,
    Synced,
    TokensStreamed,
    TokensTakenBack,
)

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.tui.app import LoomApp

STREAM_INTERVAL = 0.03  # streamed tokens are posted at most this often


class Streamer:
    """Collects streamed tokens in the worker and posts them in small batches, so a fast
    model does not flood the UI with one message per token.

    With ``loom``, the loom's cursor moves to the first new child at its first token
    (from the worker, which holds the engine): the session file then points at the text
    being written, so a crash mid-generation reopens there, not before it."""

    def __init__(self, app: LoomApp, loom: Loom | None = None) -> None:
        self.app = app
        self.loom = loom
        self.first: Node | None = None
        self.start = 0
        self.shown = 0
        self.pieces: list[str] = []
        self.total = 0
        self.began = time.monotonic()
        self.last_post = self.began
        self.posted_total = 0
        self.first_at: float | None = None  # when the first token came (after the read)
        self.last_at = self.began

    @property
    def rate(self) -> float | None:
        """Tokens per second since the first token: the decoding speed, without the
        time the model spent reading the prompt. None before two tokens."""
        if self.first_at is None or self.total < 2 or self.last_at <= self.first_at:
            return None
        return (self.total - 1) / (self.last_at - self.first_at)

    def on_token(self, node: Node, token_id: int, piece: str) -> None:
        self.total += 1
        self.last_at = time.monotonic()
        if self.first_at is None:
            self.first_at = self.last_at
        if self.first is None:
            self.first = node
            if self.loom is not None:
                self.loom.cursor = node
        if node is self.first:
            self.pieces.append(piece)
        now = time.monotonic()
        if now - self.last_post >= STREAM_INTERVAL:
            self.flush(now)

    def on_take_back(self, node: Node, length: int) -> None:
        """A banned phrase made ``node`` go back to its first ``length`` tokens."""
        if node is not self.first:
            return
        kept = max(0, length - self.shown)
        self.pieces = self.pieces[:kept]
        if length < self.shown:
            self.shown = length
            self.app.post_message(TokensTakenBack(node, length))

    def flush(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        # Posted too when only the other rows grew (the first one ended): the branch
        # pane's labels follow every row.
        if self.first is not None and (self.pieces or self.total > self.posted_total):
            self.app.post_message(
                TokensStreamed(self.first, self.shown, self.pieces, self.total, self.rate)
            )
            self.shown += len(self.pieces)
            self.pieces = []
            self.posted_total = self.total
        self.last_post = now

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.began


class GenerationActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: asking for text and showing it
    arrive."""

    def action_generate(self) -> None:
        self.when_idle(lambda: self._generate(1), sync=False)

    def action_generate_n(self) -> None:
        n = self.loom.settings.n
        self.when_idle(lambda: self._generate(max(1, n)), sync=False)

    def action_regenerate(self) -> None:
        self.when_idle(self._regenerate)

    def _regenerate(self, own_context: bool = False) -> None:
        """A new sibling of the generated node at the caret; ``own_context``: with the
        memory, author's note and world info it was generated with, not today's."""
        node = self._caret_node()
        if node is None or node.origin is not Origin.MODEL:
            node = self.doc.node
        if node is None or node.origin is not Origin.MODEL:
            self.notify("No generated text here to regenerate: ctrl+g generates", timeout=3)
            return
        # Walk up to the whole generation (truncates may have split it).
        while (
            node.parent is not None
            and node.parent.origin is Origin.MODEL
            and node.parent.created == node.created
            and len(node.parent.children) == 1
        ):
            node = node.parent
        assert node.parent is not None
        context = self.loom.context_version(node) if own_context else None
        self._generate(1, start=node.parent, context=context)

    def _generate(
        self,
        n: int,
        start: Node | None = None,
        then: Callable[[], None] | None = None,
        models: list[tuple[str, int]] | None = None,
        meta: dict | None = None,
        context: str | None = None,
    ) -> None:
        """Generate ``n`` siblings at the caret (or from ``start``); ``models`` and
        ``meta`` go to ``Loom.generate`` (siblings from several models)."""
        if self.generating:
            self.bell()
            return
        loom = self.loom
        doc = self.doc
        base = doc.node or loom.root
        text = doc.text if (start is None and doc.dirty) else None
        keep = doc.shown_tokens
        caret = doc.caret if start is None and doc.caret < doc.length else None
        settings = loom.settings  # immutable: the worker sees the settings of this moment
        max_new = settings.max_new_tokens
        sampling = settings.sampling()
        run, self.typing_run = self.typing_run, ops.TypingRun()  # a generation ends the run
        if text is not None and self._sync_timer is not None:
            self._sync_timer.stop()  # the generation job syncs the text itself
            self._sync_timer = None
        self._sync_due = False
        cancel = self._cancel
        cancel.clear()
        self.generating = True
        self._generation_lock = True
        self._lock()  # until the generation starts: the cut at the caret is not made yet
        self._refresh_status_soon()

        def job() -> None:
            node = start if start is not None else base
            kids: list[Node] = []
            streamer: Streamer | None = None  # made when generating starts: it times it
            synced: Node | None = None  # the typed text's node, once in the tree
            started = False
            try:
                if text is not None:
                    try:
                        node = synced = ops.sync_text(loom, base, text, keep, run)
                    except PrefillCancelled as stopped:
                        synced = stopped.node
                        raise
                elif start is None and keep < base.end:
                    node = loom.truncate(base, keep)
                if caret is not None:
                    position, partial = ops.split_at_char(loom, node, caret)
                    node = ops.start_point(loom, node, position, partial)
                if node.end == 0:
                    raise LoomError("nothing to continue from: type something first")
                if cancel.is_set():
                    return
                loom.cursor = node  # here, not on the UI thread: the engine is busy next
                if self.context_shown:  # what the model sees from here, then it follows
                    with loom.exclusive():
                        runs = self.context_runs(node)
                    self.post_message(ContextAssembled(runs))
                self.post_message(GenerationStarted(node, "", n))
                started = True
                streamer = Streamer(self, loom)
                kids = loom.generate(
                    node,
                    max_new,
                    n=n,
                    on_token=streamer.on_token,
                    on_take_back=streamer.on_take_back,
                    cancel=cancel,
                    models=models,
                    meta=meta,
                    context=context,
                    **sampling,
                )
                streamer.flush()
            except PrefillCancelled:
                # Escape while the model read the text: no generation, the edit is kept.
                if not started and synced is not None and text is not None:
                    node = synced
                    self.post_message(Synced(synced, text))
                raise
            finally:
                total = streamer.total if streamer is not None else 0
                seconds = streamer.seconds if streamer is not None else 0.0
                rate = streamer.rate if streamer is not None else None
                self.post_message(GenerationDone(node, kids, total, seconds, rate))

        self._after_generation = then
        self.submit("generate", job)

    def _release_generation_lock(self) -> None:
        if self._generation_lock:
            self._generation_lock = False
            self._unlock()

    def on_generation_started(self, message: GenerationStarted) -> None:
        self._tokens_per_second = None  # the last generation's speed is not this one's
        self.doc.show(message.start)
        self.doc.move_to(self.doc.length)
        self.view.follow = True
        self._release_generation_lock()
        self.view.document_changed()
        self._arrive(message.start, record=False, engine=False)

    def on_tokens_streamed(self, message: TokensStreamed) -> None:
        if self.show_speed and message.rate is not None:
            self._tokens_per_second = message.rate  # live, as the tokens come
        follow = self.view.follow
        if self.doc.extend(message.node, message.start, message.pieces):
            if follow:
                self.doc.move_to(self.doc.length)
            self.view.document_changed(scroll=follow)
            if self.context_shown:
                self.context_view.follow(message.pieces)
        if not self.branches.has_class("-hidden"):
            self.branches.text_grew()  # the rows of every sibling being written
        self._refresh_status_soon()

    def on_tokens_taken_back(self, message: TokensTakenBack) -> None:
        """Streamed text that a banned phrase took back leaves the screen."""
        doc = self.doc
        if doc.dirty or doc.node is not message.node:
            return
        follow = self.view.follow
        doc.show(message.node)
        if follow:
            doc.move_to(doc.length)
        self.view.document_changed(scroll=follow)

    def on_generation_done(self, message: GenerationDone) -> None:
        self.generating = False
        self._release_generation_lock()
        if not self.branches.has_class("-hidden"):
            self.branches.text_grew()
        if self.show_speed and message.rate is not None:
            self._tokens_per_second = message.rate
        elif self.show_speed and message.seconds > 0 and message.total:
            self._tokens_per_second = message.total / message.seconds
        doc = self.doc
        target = message.kids[0] if message.kids else message.start
        if not doc.dirty:
            follow = self.view.follow
            caret = doc.caret
            doc.show(target)
            doc.move_to(doc.length if follow else caret)
            self.view.document_changed(scroll=follow)
            self._arrive(target)
        elif message.kids:
            self.loom.cursor = target  # typed-over text syncs from what was shown
        then, self._after_generation = self._after_generation, None
        if then is not None and message.kids:
            then()
        self._refresh_status_soon()
        self._drain()

    def generation_state(self) -> str:
        """``generating · 14.2 tok/s · esc stops`` while tokens come (the rate once
        known, and only where speeds are shown)."""
        rate = self._tokens_per_second if self.show_speed else None
        if rate is None:
            return "generating\u2026 esc stops"
        return f"generating \u00b7 {rate:.1f} tok/s \u00b7 esc stops"

    def action_stop(self) -> None:
        """Esc: stop reading a long text (keeping the edit) or generating (keeping what
        came); else leave the branch pane."""
        if self._prefill is not None:
            self._interrupt.set()
        if self.generating:
            self._cancel.set()
        elif self._prefill is None and self.focused is self.branches:
            self.view.focus()

    def action_refresh_exact(self) -> None:
        node = self.doc.node
        if node is None:
            return
        loom = self.loom

        def job() -> None:
            self.post_message(Moved(loom.refresh(node)))

        self.when_idle(lambda: self.submit("refresh", job, lock=True))
