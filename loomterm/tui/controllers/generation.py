"""Generation: generate, generate N siblings, regenerate, stop, recompute exactly, and
streaming the tokens onto the screen as they come.

A generation is one job on the engine worker (``Jobs.submit``):
:class:`~loomterm.tui.controllers.generation_job.GenerationJob` first hands the engine
any typed text and cuts the path at the caret, then generates, reporting through
batched :class:`~Generation.Streamed` and one :class:`~Generation.Done`; this
controller asks for it and shows what it reports. ``generating`` (a reactive on the app)
is True from the request until ``Generation.Done``; esc sets the jobs' cancel event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tree import WRITER, Node, Origin
from loomterm.tui import ops
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.feedback import refused_while_generating
from loomterm.tui.controllers.generation_job import GenerationJob
from loomterm.tui.controllers.navigation import Navigation
from loomterm.tui.controllers.slowdown import Slowdown

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.tui.controllers.context import Context
    from loomterm.tui.controllers.navigation import Navigation

STOPPING = "stopping\u2026"  # the status bar from escape until the engine has stopped


@dataclass(eq=False, repr=False)
class Generation(Controller):
    """Asking for text and showing it arrive."""

    # What a generation reports, posted by its job on the worker (``generation_job``);
    # handled as ``on_generation_started`` and so on.
    Started = GenerationJob.Started
    Streamed = GenerationJob.Streamed
    TakenBack = GenerationJob.TakenBack
    Done = GenerationJob.Done

    navigation: Navigation
    context: Context
    # run when this generation has ended
    then: Callable[[], None] | None = field(default=None, init=False)
    # the document is locked until the generation starts
    lock_held: bool = field(default=False, init=False)
    # of the last generation (status bar)
    tokens_per_second: float | None = field(default=None, init=False)
    # says when decoding collapses (a busy CPU)
    slowdown: Slowdown = field(default_factory=Slowdown, init=False)

    @key_action(when_idle=True)
    def regenerate_own_context(self) -> None:
        """Regenerate the generated node at the caret with the context it was made
        with (memory, author's note, world info of that time), not the current one."""
        self.regenerate(own_context=True)

    @key_action()
    def stop(self) -> None:
        """Esc: stop reading a long text (keeping the edit) or generating (keeping what
        came); else leave the branch pane."""
        app = self.app
        reading = app.progress.prefill is not None
        if reading:
            self.jobs.interrupt.set()
        if app.generating:
            self.jobs.cancel.set()
        elif not reading and app.focused is app.branches:
            app.view.focus()
        app.status_line.refresh()  # "stopping…" at once; the engine ends its step first

    def can_stop(self) -> bool:
        """Stop (esc) is offered only while generating or reading a long text; esc
        otherwise reaches the widgets (and leaves the branch pane)."""
        return self.app.generating or self.app.progress.prefill is not None

    def generate_n(self) -> None:
        """N siblings (the ``n`` setting) at the caret, once idle."""
        n = self.app.loom.settings.n
        self.jobs.when_idle(lambda: self.generate(max(1, n)), sync=False)

    def regenerated(self) -> Node | None:
        """The generated node at the caret that ctrl+r makes a new sibling of (the
        whole generation: truncates may have split it), or None."""
        app = self.app
        node = self.navigation.caret_node()
        if node is None or node.origin is not Origin.MODEL:
            node = app.doc.node
        if node is None or node.origin is not Origin.MODEL:
            return None
        while (
            node.parent is not None
            and node.parent.origin is Origin.MODEL
            and node.parent.created == node.created
            and len(node.parent.children) == 1
        ):
            node = node.parent
        return node

    def regeneration_start(self) -> Node | None:
        """Where ctrl+r generates from now (None: nothing to regenerate here)."""
        node = self.regenerated()
        return None if node is None else node.parent

    @key_action(when_idle=True)
    def regenerate(self, own_context: bool = False) -> None:
        """A new sibling of the generated node at the caret; ``own_context``: with the
        memory, author's note and world info it was generated with, not today's."""
        app = self.app
        node = self.regenerated()
        if node is None:
            app.notify("No generated text here to regenerate: ctrl+g generates", timeout=3)
            return
        assert node.parent is not None
        context = app.loom.context_version(node) if own_context else None
        start = healed_from(app.loom, node) or node.parent
        self.generate(1, start=start, context=context)

    def generate_when_idle(self) -> None:
        """:meth:`generate` (one sibling at the caret) once the engine is idle, as its
        key does: after a job that showed a node and asked for a generation there."""
        self.jobs.when_idle(self.generate, sync=False)

    @key_action(when_idle=True, sync=False)
    def generate(
        self,
        n: int = 1,
        start: Node | None = None,
        then: Callable[[], None] | None = None,
        models: list[tuple[str, int]] | None = None,
        meta: dict | None = None,
        context: str | None = None,
    ) -> None:
        """Generate ``n`` siblings at the caret (or from ``start``); ``models`` and
        ``meta`` go to ``Loom.generate`` (siblings from several models)."""
        app = self.app
        if refused_while_generating(app):
            return
        loom = app.loom
        doc = app.doc
        base = doc.node or loom.root
        text = doc.text if (start is None and doc.dirty) else None
        keep = doc.shown_tokens
        caret = doc.caret if start is None and doc.caret < doc.length else None
        settings = loom.settings  # immutable: the worker sees the settings of this moment
        run, app.typing.run = app.typing.run, ops.TypingRun()  # a generation ends the run
        app.typing.taken(text is not None)  # the generation job syncs the text itself
        cancel = self.jobs.cancel
        cancel.clear()
        app.generating = True
        self.lock_held = True
        self.jobs.lock()  # until the generation starts: the cut at the caret is not made yet
        app.status_line.soon()
        job = GenerationJob(
            app,
            self.context,
            loom,
            cancel,
            n,
            base,
            start,
            text,
            keep,
            caret,
            settings,
            models,
            meta,
            context,
            run,
        )
        self.then = then
        self.jobs.submit("generate", job.run)

    def release_lock(self) -> None:
        if self.lock_held:
            self.lock_held = False
            self.jobs.unlock()

    def started(self, message: Generation.Started) -> None:
        """The cut at the caret is made and the first token is on its way."""
        app = self.app
        self.tokens_per_second = None  # the last generation's speed is not this one's
        self.slowdown.start((app.loom.active_model, message.n))
        app.doc.show(message.start)
        app.doc.move_to(app.doc.length)
        app.view.follow = True
        self.release_lock()
        app.view.document_changed()
        self.navigation.arrive(message.start, record=False, engine=False)

    def streamed(self, message: Generation.Streamed) -> None:
        """A batch of streamed tokens: onto the screen, following if it was."""
        app = self.app
        if app.show_speed and message.rate is not None:
            self.tokens_per_second = message.rate  # live, as the tokens come
        self.slowdown.tokens(message.total, time.monotonic())
        follow = app.view.follow
        if app.doc.extend(message.node, message.start, message.pieces):
            if follow:
                app.doc.move_to(app.doc.length)
            app.view.document_changed(scroll=follow)
            if self.context.shown:
                app.context_view.follow(message.pieces)
        if not app.branches.has_class("-hidden"):
            app.branches.text_grew()  # the rows of every sibling being written
        app.status_line.soon()

    def taken_back(self, message: Generation.TakenBack) -> None:
        """Streamed text that a banned phrase took back leaves the screen."""
        app = self.app
        doc = app.doc
        if doc.dirty or doc.node is not message.node:
            return
        follow = app.view.follow
        doc.show(message.node)
        if follow:
            doc.move_to(doc.length)
        app.view.document_changed(scroll=follow)

    def done(self, message: Generation.Done) -> None:
        """The generation ended (finished, stopped or failed): show where it got."""
        app = self.app
        app.generating = False
        self.release_lock()
        if not app.branches.has_class("-hidden"):
            app.branches.text_grew()
        if app.show_speed and message.rate is not None:
            self.tokens_per_second = message.rate
        elif app.show_speed and message.seconds > 0 and message.total:
            self.tokens_per_second = message.total / message.seconds
        doc = app.doc
        target = message.kids[0] if message.kids else message.start
        if not doc.dirty:
            follow = app.view.follow
            caret = doc.caret
            doc.show(target)
            doc.move_to(doc.length if follow else caret)
            app.view.document_changed(scroll=follow)
            self.navigation.arrive(target)
        elif message.kids:
            app.loom.cursor = target  # typed-over text syncs from what was shown
        if self.slowdown.slow:  # ended slow: said once more, where it stays readable
            threads = getattr(app.loom.runner, "threads", None)
            app.notify(f"Decoding {self.slowdown.advice(threads)}", severity="warning", timeout=8)
            self.slowdown.slow = False
        then, self.then = self.then, None
        if then is not None and message.kids:
            then()
        app.status_line.soon()
        self.jobs.drain()

    def state(self) -> str:
        """``generating · 14.2 tok/s · esc stops`` while tokens come (the rate once
        known, and only where speeds are shown); while decoding has collapsed, how far
        and what helps (``slowdown``); ``stopping…`` from the escape that stops it to
        the end of the token under way."""
        if self.jobs.cancel.is_set():  # escape (or typing over it) was heard
            return STOPPING
        if self.slowdown.slow:  # shown whatever show_speed says: it explains the wait
            threads = getattr(self.app.loom.runner, "threads", None)
            return f"generating \u00b7 {self.slowdown.advice(threads)} \u00b7 esc stops"
        rate = self.tokens_per_second if self.app.show_speed else None
        if rate is None:
            return "generating\u2026 esc stops"
        return f"generating \u00b7 {rate:.1f} tok/s \u00b7 esc stops"

    @key_action()
    def refresh_exact(self) -> None:
        """Recompute the shown node's path exactly (a job, once idle)."""
        app = self.app
        node = app.doc.node
        count = sum(1 for n in node.path() if n.approx) if node is not None else 0
        if node is None or not count:  # said, so the key is not taken for a dead one
            app.notify("Nothing to recompute: this path is exact", timeout=2)
            return
        loom = app.loom
        nodes = f"{count} approximate node{'' if count == 1 else 's'}"
        app.notify(f"Recomputing {nodes} exactly\u2026", timeout=2)

        def job() -> None:
            app.post_message(Navigation.Moved(loom.refresh(node)))
            app.call_from_thread(app.notify, f"Recomputed {nodes} exactly", timeout=2)

        self.jobs.when_idle(lambda: self.jobs.submit("refresh", job, lock=True))


def healed_from(loom: Loom, node: Node) -> Node | None:
    """The typed node a healed generation ``node`` started from: its sibling written by
    the writer whose tokens spell what ``node`` healed (``meta["healed"]``), so that a
    regeneration heals the same typed word again. None when ``node`` was not healed."""
    typed = node.meta.get("healed")
    if not isinstance(typed, str) or node.parent is None:
        return None
    for sibling in node.parent.children:
        spelled = b"".join(loom.codec.token_bytes(t) for t in sibling.tokens)
        if sibling.origin in WRITER and spelled == typed.encode():
            return sibling
    return None
