"""Typed text on its way to the engine.

Keys edit the :class:`~loomterm.tui.document.DocumentModel` at once; the screen never
waits on the model. When typing pauses (the app's ``sync_delay``), or before anything
that needs the engine, the text goes to the engine as one ``Loom.edit`` (a ``sync``
job), which ends in :class:`Typing.Synced`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.errors import PrefillCancelled
from loomterm.tree import Node
from loomterm.tui import ops
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.history import Place

if TYPE_CHECKING:
    from textual.timer import Timer

    from loomterm.tui.controllers.keeping import Keeping
    from loomterm.tui.controllers.lifecycle import Lifecycle
    from loomterm.tui.widgets.document_view import DocumentView


@dataclass(eq=False, repr=False)
class Typing(Controller):
    """The typed text and its sync: the pending timer, the run of nodes typing writes
    into (``run``), and the text the engine last refused as it was."""

    @dataclass
    class Synced(Message):
        """The engine caught up with the typed text: ``node``'s path reads ``text``."""

        node: Node
        text: str

    lifecycle: Lifecycle
    keeping: Keeping
    delay: float
    due: bool = field(default=False, init=False)
    timer: Timer | None = field(default=None, init=False)
    # The nodes this run of typing writes into (``ops.TypingRun``): a new run
    # begins when the caret leaves them, a generation starts or on "branch here".
    run: ops.TypingRun = field(default_factory=ops.TypingRun, init=False)
    # the text a sync refused, not sent again as is
    failed: str | None = field(default=None, init=False)

    def edited(self, event: DocumentView.Edited) -> None:
        """The user typed (or undid typing): sync once the typing pauses."""
        app = self.app
        if app.generating:
            self.jobs.cancel.set()  # typing over a generation stops it; the typing wins
        self.failed = None
        self.lifecycle.note_change()
        self.keeping.edited()  # while the model loads: written to the file at once
        doc = app.doc
        if not event.undoing and self.word_step():
            app.history.push(Place(doc.node or app.loom.root, doc.caret, doc.text))
        self._stop_timer()
        self.timer = app.set_timer(self.delay, self.sync_now)
        app.status_line.soon()

    def word_step(self) -> bool:
        """A word of typing just ended on text that only goes on after what the engine
        has: a step for undo, as editors coalesce typing. An edit of text the tree
        already holds (the model's words, or the writer's before the caret) is one
        step however many words it has: its texts between keys are no state of the
        tree, and undoing to one would make a branch of a half-made text."""
        doc = self.app.doc
        return doc.word_ended() and doc.text.startswith(doc.synced_text)

    def caret_moved(self) -> None:
        """The caret moved: a run of typing ends where the caret leaves its text."""
        if self.run.ids:
            node = self.app.doc.node_before_caret()
            if node is not None and node.id not in self.run.ids:
                self.run = ops.TypingRun()
        self.app.status_line.soon()  # the sibling and depth of the caret's branch

    @key_action()
    def branch_here(self) -> None:
        """The next keystroke makes a new branch, even in text of the writer's own that
        would be retyped in place; the old text stays as it is."""
        self.run = ops.TypingRun(branch=True)
        self.app.notify("The next edit starts a new branch here", timeout=2)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.stop()
            self.timer = None

    def sync_now(self) -> None:
        """Hand the typed text to the engine now (or as soon as it is free)."""
        self._stop_timer()
        self.due = True
        self.jobs.drain()

    def waiting(self) -> bool:
        """Typed text the engine has not got yet (and did not refuse as it is)."""
        doc = self.app.doc
        return doc.dirty and doc.text != self.failed

    def is_due(self) -> bool:
        """The typing paused (or something asked for it): the text should go now."""
        return self.due and self.app.doc.dirty

    def taken(self, timer: bool) -> None:
        """The next job hands the typed text to the engine itself: no separate sync
        (``timer``: and the pending one is stopped)."""
        if timer:
            self._stop_timer()
        self.due = False

    def start(self) -> None:
        """Hand the typed text to the engine as one job."""
        self.due = False
        self._stop_timer()
        app = self.app
        doc = app.doc
        base = doc.node or app.loom.root
        keep = doc.shown_tokens
        text = doc.text
        loom = app.loom
        run = self.run

        def job() -> None:
            try:
                node = ops.sync_text(loom, base, text, keep, run)
            except PrefillCancelled as stopped:  # escape: the edit is in the tree whole
                if stopped.node is not None:
                    app.post_message(Typing.Synced(stopped.node, text))
                raise
            from loomterm.sessions.session import typed_read

            typed_read(loom)  # the file no longer needs the text typed during a load
            app.post_message(Typing.Synced(node, text))

        self.jobs.submit("sync", job)
        app.status_line.soon()

    def synced(self, message: Typing.Synced) -> None:
        """The engine has the text: show its node, or (typing having gone on) build
        the newer text on it."""
        doc = self.app.doc
        if doc.text == message.text:
            doc.show(message.node)
            self.app.view.document_changed(scroll=False)
        else:
            # More typing arrived meanwhile: it now builds on the synced node.
            doc.rebase(message.node, message.text)
            self.due = True
