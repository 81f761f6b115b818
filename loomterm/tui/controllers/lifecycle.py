"""The editor's life around the work: read-only sessions (a change is kept in memory
and offered as a new session on quit), and quitting.

Quitting answers at once, whatever the model is doing: it stops the engine's job
(generating, reading a long text), writes the text the model has not read yet into
the session file (``Keeping.keep_unread``), then leaves as soon as the engine is idle
and has the text, or after :data:`QUIT_WAIT` without that (a llama.cpp step or a
prefill chunk that takes long on a busy CPU, a sync of a long edit): the session is
closed then, and the command leaves the process without waiting for the job
(``Jobs.running``). A reopened session shows the kept text as typing to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tui import sessions

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs
    from loomterm.tui.controllers.looks import Looks

QUIT_WAIT = 0.4  # seconds quitting waits for the engine's job to stop before leaving it


class Lifecycle:
    """Read-only sessions and quitting: ``read_only`` while the open session is one
    (``unsaved`` once it was changed), ``quitting`` once quit was asked for."""

    @dataclass
    class SavedAs(Message):
        """The session (a read-only one) was saved as the new session ``name``."""

        name: str

    def __init__(self, app: Editor, jobs: Jobs, looks: Looks) -> None:
        self.app = app
        self.jobs = jobs
        self.looks = looks
        self.quitting = False
        self.typing_in = False  # quitting: the keys typed before ctrl+q are applied
        self.read_only = sessions.is_read_only(app.loom)  # the open session's
        self.unsaved = False  # a read-only session was changed (in memory only)

    # -- read-only sessions ---------------------------------------------------------
    def note_change(self) -> None:
        """The session changed: in a read-only one, say once that nothing is saved."""
        app = self.app
        if self.read_only and not self.unsaved:
            self.unsaved = True
            app.notify(
                "Read-only session: changes stay in memory; quitting offers to save them "
                "as a new session",
                severity="warning",
                timeout=6,
            )
            app.status_line.soon()

    def offer_save_as(self) -> None:
        """Quitting a changed read-only session: save as a new one, drop, or stay."""
        from loomterm.tui.widgets.dialogs import SaveAsScreen

        app = self.app
        name = app.session_name or "session"
        default = sessions.free_name(f"{name}-copy")

        def answered(choice: str | None) -> None:
            if choice is None:
                self.quitting = False
                return
            if not choice:
                self.finish(ask=False)
                return
            loom = app.loom

            def job() -> None:
                sessions.save_as(loom, choice)
                app.post_message(Lifecycle.SavedAs(choice))

            self.jobs.submit("save as", job)

        app.push_screen(SaveAsScreen(name, default, sessions.name_problem), answered)

    def saved_as(self, message: Lifecycle.SavedAs) -> None:
        """The read-only session's changes are a new session now; go on quitting."""
        app = self.app
        self.read_only = False
        self.unsaved = False
        app.session_name = message.name
        app.status_line.show_title()
        app.status_line.refresh()
        if self.quitting:
            self.jobs.when_idle(self.finish)
        else:
            app.notify(f"Saved as session {message.name!r}", timeout=4)

    # -- quitting ----------------------------------------------------------------------
    def quit(self) -> None:
        """Stop generating, hand the last typing to the engine, then leave (a changed
        read-only session first asks whether to save the changes as a new one)."""
        app = self.app
        asks = self.read_only and self.unsaved
        if self.quitting:
            if asks and app.loader is not None:  # asked twice while the model loads
                app.keeping.quit_while_loading()  # without saving, as the note said
            return
        self.quitting = True
        jobs = self.jobs
        jobs.cancel.set()
        if app.loader is not None and not asks:
            jobs.interrupt.set()  # a long read stops at its next chunk
            app.keeping.quit_while_loading()  # the typing is written; the load left
            return
        if app.loader is not None:
            # A read-only session's typing is in no file: the offer to save it as a new
            # session needs the model, so quitting waits for the load.
            key = self.looks.key_for("quit")
            app.notify(
                "Read-only session: your typing is saved nowhere yet. Once the model has "
                f"loaded you can save it as a new session; {key} again quits without it.",
                severity="warning",
                timeout=10,
            )
        else:
            jobs.interrupt.set()  # a long read stops at its next chunk
        self.typing_in = False

        def typed_in() -> None:
            self.typing_in = True
            if not asks:
                app.keeping.keep_unread()  # in the file now, whatever the engine does
            jobs.when_idle(self.finish)

        if not asks:
            app.set_timer(QUIT_WAIT, self.leave_busy)
        # ctrl+q is a priority binding: it runs before keys typed just ahead of it have
        # reached the document. Those are applied first, then the engine gets the text.
        app.view.after_input(typed_in)

    def leave_busy(self) -> None:
        """The engine's job did not stop within :data:`QUIT_WAIT`: leave it running
        (the typing is in the file already; the session is closed without it). Keys
        held while a job locked the document are applied first (its result will not
        come back to replace the document)."""
        app = self.app
        if not self.quitting or self.read_only or app.return_code is not None:
            return
        if not self.typing_in:
            app.view.apply_held()
            app.set_timer(0.05, self.leave_busy)  # once they are in (and written)
            return
        if self.jobs.running is None and not self.jobs.deferred:
            return  # idle: ``finish`` runs (or ran) in order
        app.keeping.close_for_exit()
        self.finish(ask=False)

    def finish(self, ask: bool = True) -> None:
        """Leave now (a changed read-only session first offers to save as a new one)."""
        app = self.app
        if ask and self.read_only and self.unsaved:
            self.offer_save_as()
            return
        if self.jobs.idle and not app.doc.dirty:
            app.keeping.all_read()
        self.jobs.queue.put(None)
        app.exit()
