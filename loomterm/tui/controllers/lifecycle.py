"""The editor's life around the work: read-only sessions (a change is kept in memory
and offered as a new session on quit), and quitting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tui import sessions

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.jobs import Jobs


class Lifecycle:
    """Read-only sessions and quitting; ``quitting`` is True once quit was asked for."""

    class SavedAs(Message):
        """The session (a read-only one) was saved as the new session ``name``."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, app: Editor, jobs: Jobs) -> None:
        self.app = app
        self.jobs = jobs
        self.quitting = False

    # -- read-only sessions ---------------------------------------------------------
    def note_change(self) -> None:
        """The session changed: in a read-only one, say once that nothing is saved."""
        app = self.app
        if app.read_only and not app.unsaved:
            app.unsaved = True
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

        app.push_screen(SaveAsScreen(name, default), answered)

    def saved_as(self, message: Lifecycle.SavedAs) -> None:
        """The read-only session's changes are a new session now; go on quitting."""
        app = self.app
        app.read_only = False
        app.unsaved = False
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
        if self.quitting:
            return
        self.quitting = True
        self.jobs.cancel.set()
        app = self.app
        if app.loader is not None and not (app.read_only and app.unsaved):
            app.keeping.quit_while_loading()  # the typing is written; the load left
            return
        # ctrl+q is a priority binding: it runs before keys typed just ahead of it have
        # reached the document. Those are applied first, then the engine gets the text.
        self.app.view.after_input(lambda: self.jobs.when_idle(self.finish))

    def finish(self, ask: bool = True) -> None:
        """Leave now (a changed read-only session first offers to save as a new one)."""
        app = self.app
        if ask and app.read_only and app.unsaved:
            self.offer_save_as()
            return
        self.jobs.queue.put(None)
        app.exit()
