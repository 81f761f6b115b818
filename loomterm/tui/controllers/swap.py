"""Which Loom the editor holds, and putting another in its place: at start, a session
switched to (at once, or its file's preview while its model loads) and the real Loom
taking the preview's place once its model is loaded (``loomterm.tui.model_loading``).

The held Loom's own events (from whichever thread changed it) reach the app as
:class:`Swap.LoomChanged`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tree import Node
from loomterm.tui import sessions
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.document import DocumentModel
from loomterm.tui.history import History, Place
from loomterm.tui.model_loading import StartupLoader

if TYPE_CHECKING:
    from loomterm.sessions.opening import SessionOpening
    from loomterm.tui.controllers.caret import Caret
    from loomterm.tui.controllers.generation import Generation
    from loomterm.tui.controllers.models import Models
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.panes import Panes
    from loomterm.tui.controllers.progress import Progress
    from loomterm.tui.editor_loom import EditorLoom


def new_document(loom: EditorLoom) -> DocumentModel:
    """An empty document decoding with ``loom``'s tokenizer."""
    codec = loom.codec
    special = set(codec.special_ids) | set(codec.added_ids)
    return DocumentModel(codec.token_bytes, special)


CHANGES = frozenset({"add", "split", "update", "rewrite", "settings"})  # change the session
SHAPES = frozenset({"add", "split", "update", "rewrite"})  # change the branch pane


@dataclass(eq=False, repr=False)
class Swap(Controller):
    """Holds the app's Loom: hears its events, lets go of it, puts another in place."""

    @dataclass
    class LoomChanged(Message):
        """The Loom reported a change (from any thread): add, split, update, done,
        cursor, settings. Token-by-token growth comes as ``Generation.Streamed``."""

        event: str
        node: Node | None

    progress: Progress
    caret: Caret
    navigation: Navigation
    generation: Generation
    models: Models
    panes: Panes

    def hear(self, loom: EditorLoom) -> None:
        """Hear ``loom``'s changes and prefill progress (the status bar), and let
        escape stop it."""
        loom.subscribe(self.heard)
        loom.progress = self.progress.report
        loom.interrupt = self.jobs.interrupt

    def heard(self, event: str, node: Node | None) -> None:
        """Loom listener: called on the thread that changed the loom. Token growth
        comes through the streamer instead."""
        if event != "tokens":
            self.app.post_message(Swap.LoomChanged(event, node))

    def let_go(self, loom: EditorLoom) -> None:
        """Stop hearing ``loom`` (another session replaces it, or the editor quits)."""
        loom.unsubscribe(self.heard)
        loom.progress = loom.interrupt = None

    def open_loom(self, loom: EditorLoom, name: str) -> None:
        """Put ``loom`` (another session) in place of the open one, named ``name`` (or
        as before): a new document and history, the caches cleared. A session whose
        model was still loading is given up (its file given back, the work held for it
        dropped)."""
        app = self.app
        if app.loader is not None:
            app.loader.opening.close()
            app.loader = None
        app.loom = loom
        app.session_name = name or app.session_name
        self.generation.tokens_per_second = None  # the last session's speed is not this one's
        app.lifecycle.read_only = sessions.is_read_only(loom)
        app.lifecycle.unsaved = False
        self.hear(loom)
        app.doc = new_document(loom)
        app.view.doc = app.doc
        app.history = History()
        self.navigation.last_seen.clear()
        self.panes.forget_texts()
        self.panes.rebuild_tree()
        app.status_line.show_title()

    def open_preview(self, opening: SessionOpening, name: str) -> None:
        """Put ``opening``'s session (another one) in place of the open one at once, from
        its file, and load its model in the background as at start (the status bar
        shows it; what needs the model waits for it, in order)."""
        app = self.app
        preview = opening.preview()
        self.open_loom(preview, name)
        app.loader = loader = StartupLoader(app, self.jobs, opening)
        loader.start()
        self.show_start(preview.cursor)
        app.view.document_changed()
        app.refresh_bindings()
        app.status_line.soon()

    def show_start(self, cursor: Node) -> None:
        """Show ``cursor`` as a session opens: the caret where it was left."""
        self.app.doc.show(cursor)
        self.caret.place_saved(cursor)  # where the user left it (else the end)
        self.started(cursor)

    def started(self, cursor: Node) -> None:
        """The session opened at ``cursor``, its caret placed: the first place to go
        back to, and where a model still loading finds it."""
        app = self.app
        if app.loader is not None:
            app.loader.caret_at_start = app.doc.caret
        app.history.push(Place(cursor, app.doc.caret))
        self.navigation.remember(cursor)

    def when_model_ready(self, run: Callable[[], object], what: str) -> None:
        """Run ``run`` now, or (the model still loading) once it is ready."""
        loader = self.app.loader
        if loader is None:
            run()
        else:
            loader.hold(run, what)

    def model_ready(self, loom: EditorLoom) -> None:
        """The real Loom takes the preview's place; held work runs, in order."""
        app = self.app
        loader, preview = app.loader, app.loom
        if loader is None:
            return
        app.loader = None
        app.loom = loom
        app.lifecycle.read_only = sessions.is_read_only(loom)
        self.hear(loom)
        doc = app.doc
        if doc.dirty or doc.node is None or loom.tree is not preview.tree:
            # Typing is under way: it stays; the real tokenizer decodes from now on.
            codec = loom.codec
            doc.token_bytes = codec.token_bytes
            doc.special_ids = set(codec.special_ids) | set(codec.added_ids)
        else:
            node, caret = doc.node, doc.caret
            app.doc = new_document(loom)
            app.view.doc = app.doc
            app.doc.show(node)
            if caret == loader.caret_at_start:
                self.caret.place_saved(node)  # the session records where it was left
            else:
                app.doc.move_to(min(caret, app.doc.length))
            app.view.document_changed(scroll=False)
        self.panes.forget_texts()
        self.models.changed()
        self.models.show_notes()
        self.panes.rebuild_tree_soon()
        app.refresh_bindings()
        for run in loader.take_waiting():
            app.call_later(run)
        app.status_line.soon()

    def changed(self, message: Swap.LoomChanged) -> None:
        """The held Loom changed: the document, the branch pane and the status bar
        follow."""
        app, event, node = self.app, message.event, message.node
        if event == "rewrite" and node is not None:
            app.doc.forget(node)  # its tokens changed in place: decode it again
        if event in CHANGES:
            app.lifecycle.note_change()
        if event in SHAPES:
            self.panes.rebuild_tree_soon()
        if event == "add" and node is not None:
            app.unread.added(node)
        if event == "update" and node is not None:
            app.view.redraw()
        app.status_line.soon()
