"""Sessions inside the editor: the session picker (open, create, rename, delete), going
back to the previous session, and putting another session in place of the open one
(which is saved and closed first; an empty one is deleted, so nothing is left behind).

The file work is in ``loomterm.tui.sessions``; opening a session reads its tree (and
perhaps loads its model), so it runs as a worker job that ends in
:class:`~loomterm.tui.messages.SessionSwitched`.
"""

from __future__ import annotations

from pathlib import Path

from loomterm.errors import SessionError
from loomterm.tui import sessions
from loomterm.tui.history import History
from loomterm.tui.messages import Moved, SessionSwitched
from loomterm.tui.widgets.sessions import SessionChoice, SessionsScreen


def name_of(path: Path) -> str:
    return path.name.removesuffix(".loom")


class SessionActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: sessions switched in place."""

    previous_session: Path | None = None
    """The session open before this one (``Back to previous session``)."""

    def action_sessions(self) -> None:
        current = sessions.session_file(self.loom)
        hint = ""
        if current is None:
            hint = "This text is in no session file: opening another one drops it."

        def chosen(choice: SessionChoice | None) -> None:
            if choice is not None:
                self.switch_session(choice)

        self.push_screen(SessionsScreen(current, hint=hint), chosen)

    def action_previous_session(self) -> None:
        path = self.previous_session
        if path is None or not path.exists():
            self.notify("No previous session to go back to", timeout=2)
            return
        self.switch_session(SessionChoice("open", path))

    def switch_session(self, choice: SessionChoice) -> None:
        """Open, create or rename (the open one) as the picker asked, in the worker."""
        old = self.loom

        def job() -> None:
            if choice.kind == "new":
                new = sessions.create_like(old, choice.name)
                self.post_message(SessionSwitched(new, choice.name, new.root, False))
                return
            path = choice.path
            assert path is not None
            name = name_of(path)
            if choice.kind == "rename":
                path, name = self._rename_open(path, choice.name), choice.name
            new = sessions.open_in_place(old, path, progress=self._on_progress)
            self.post_message(SessionSwitched(new, name, new.cursor, False))

        def start() -> None:
            self.report_caret()  # before a rename closes the session in the worker
            self.submit("session", job, lock=True)

        self.when_idle(start, stop=True)

    def _rename_open(self, path: Path, name: str) -> Path:
        """Rename the open session (in the worker): close it, rename, and hand back
        the path to reopen; on failure, the old path (reopened as it was)."""
        from loomterm.session import close_session, session_path

        target = session_path(sessions.check_name(name))
        if target.exists():
            raise SessionError(f"a session named {name!r} exists already: choose another name")
        close_session(self.loom)
        try:
            return sessions.rename(path, name)
        except Exception as exc:  # noqa: BLE001 - reopened as it was, and reported
            self.call_from_thread(self.notify, f"not renamed: {exc}", severity="error")
            return path

    def on_session_switched(self, message: SessionSwitched) -> None:
        """Put the new session in place of the old one, which is saved and closed (and
        deleted if nothing was ever written in it)."""
        from loomterm.session import close_session

        old, new = self.loom, message.loom
        old_path = sessions.session_file(old)
        self.report_caret()  # the old session keeps where its caret was
        old.unsubscribe(self._on_loom_event)
        old.progress = old.interrupt = None
        close_session(old)
        if sessions.discard_if_empty(old):
            old_path = None
        # A renamed session is this one under its new name: not a session to go back to.
        if (
            old_path is not None and old_path.exists() and old_path != sessions.session_file(new)  # type: ignore[arg-type]
        ):
            self.previous_session = old_path
        self.loom = new  # type: ignore[assignment]
        self.session_name = message.name or self.session_name
        self._tokens_per_second = None  # the last session's speed is not this one's
        self.read_only = sessions.is_read_only(new)  # type: ignore[arg-type]
        self.unsaved = False
        new.subscribe(self._on_loom_event)  # type: ignore[attr-defined]
        self._attach_engine(new)  # type: ignore[arg-type]
        self.doc = self._new_document(new)  # type: ignore[arg-type]
        self.view.doc = self.doc
        self.history = History()
        self._last_seen.clear()
        self._text_cache.clear()
        self._rebuild_tree()
        self.show_title()
        caret = self.saved_caret(message.node)
        if caret is None:
            self.on_moved(Moved(message.node, then_generate=message.then_generate))
        else:  # where the user left the caret in that session
            self.show_node(message.node, caret)
        back = ""
        if self.previous_session is not None:
            back = f"; 'Back to previous session' returns to {name_of(self.previous_session)!r}"
        self.notify(f"Now in session {self.session_name!r}{back}", timeout=5)
