"""Sessions inside the editor: the session picker (open, create, rename, delete), going
back to the previous session, and putting another session in place of the open one
(which is saved and closed first; an empty one is deleted, so nothing is left behind).

The file work is in ``loomterm.tui.sessions``; opening a session reads its tree (and
perhaps loads its model), so it runs as a worker job that ends in
:class:`~Sessions.Switched`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tui import sessions
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.widgets.sessions import SessionChoice, SessionsScreen

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.sessions.opening import SessionOpening
    from loomterm.tree import Node
    from loomterm.tui.controllers.caret import Caret
    from loomterm.tui.controllers.generation import Generation
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.progress import Progress


def name_of(path: Path) -> str:
    return path.name.removesuffix(".loom")


@dataclass(eq=False, repr=False)
class Sessions(Controller):
    """Sessions switched in place; remembers the one open before."""

    @dataclass
    class Switched(Message):
        """A new session (a new chat) replaces the open one; ``node`` is where to stand."""

        loom: Loom
        name: str
        node: Node
        then_generate: bool

    @dataclass
    class Previewed(Message):
        """Another session replaces the open one before its model is loaded: ``opening``'s
        preview is shown at once and its model loads in the background."""

        opening: SessionOpening
        name: str

    navigation: Navigation
    caret: Caret
    generation: Generation
    progress: Progress  # a session opening loads its model: the status bar shows it
    previous: Path | None = field(default=None, init=False)
    """The session open before this one (``Back to previous session``)."""
    fallback: tuple[Loom, Path | None, Path | None] | None = field(default=None, init=False)
    """While a session switched to loads its model: the session left (its closed
    Loom, whose models are still in memory, and its file), to go back to if the
    model cannot load, and the previous session before the switch."""

    @key_action("sessions")
    def pick(self) -> None:
        """The session picker; its choice is opened, made or renamed."""
        app = self.app
        current = sessions.session_file(app.loom)
        hint = ""
        if current is None:
            hint = "This text is in no session file: opening another one drops it."

        def chosen(choice: SessionChoice | None) -> None:
            if choice is not None:
                self.switch(choice)

        app.push_screen(SessionsScreen(current, hint=hint), chosen)

    @key_action("previous_session")
    def back(self) -> None:
        """Open the session open before this one."""
        path = self.previous
        if path is None or not path.exists():
            self.app.notify("No previous session to go back to", timeout=2)
            return
        self.switch(SessionChoice("open", path))

    def switch(self, choice: SessionChoice) -> None:
        """Open, create or rename (the open one) as the picker asked, in the worker."""
        app = self.app
        old = app.loom

        def job() -> None:
            if choice.kind == "new":
                new = sessions.create_like(old, choice.name)
                app.post_message(Sessions.Switched(new, choice.name, new.root, False))
                return
            path = choice.path
            assert path is not None
            name = name_of(path)
            if choice.kind == "rename":
                path, name = self.rename_open(path, choice.name), choice.name
            else:
                opening = sessions.opening_elsewhere(old, path)
                if opening is not None:  # on a model not in memory: shown first
                    app.post_message(Sessions.Previewed(opening, name))
                    return
            new = sessions.open_in_place(old, path, progress=self.progress.report)
            app.post_message(Sessions.Switched(new, name, new.cursor, False))

        def submit() -> None:
            self.caret.report()  # before a rename closes the session in the worker
            self.jobs.submit("session", job, lock=True)

        def start() -> None:
            if choice.kind != "open" or choice.path is None:
                submit()
                return
            from loomterm.tui.key_consent import ask_then, servers_in_file

            # Its servers get no key unasked (``key_consent``): ask before the switch.
            ask_then(app, servers_in_file(choice.path), submit)

        self.jobs.when_idle(start, stop=True)

    def rename_open(self, path: Path, name: str) -> Path:
        """Rename the open session (in the worker): close it, rename, and hand back
        the path to reopen; on failure, the old path (reopened as it was)."""
        from loomterm.sessions.session import close_session

        sessions.new_session_path(name)  # a name a session can take, or a one-line error
        close_session(self.app.loom)
        try:
            return sessions.rename(path, name)
        except Exception as exc:  # noqa: BLE001 - reopened as it was, and reported
            self.app.call_from_thread(self.app.notify, f"not renamed: {exc}", severity="error")
            return path

    def let_go_of_open(self, new_path: Path | None) -> tuple[Loom, Path | None]:
        """Save and close the open session (deleted if nothing was ever written in it),
        remembered as the one to go back to unless it is ``new_path``; returns its Loom
        and file."""
        from loomterm.sessions.session import close_session

        app = self.app
        old = app.loom
        old_path = sessions.session_file(old)
        self.caret.report()  # the old session keeps where its caret was
        app.swap.let_go(old)
        close_session(old)
        if sessions.discard_if_empty(old):
            old_path = None
        # A renamed session is this one under its new name: not a session to go back to.
        if old_path is not None and old_path.exists() and old_path != new_path:
            self.previous = old_path
        return old, old_path

    def switched(self, message: Sessions.Switched) -> None:
        """Put the new session in place of the old one, which is saved and closed (and
        deleted if nothing was ever written in it)."""
        app = self.app
        new = message.loom
        self.let_go_of_open(sessions.session_file(new))
        self.fallback = None
        app.swap.open_loom(new, message.name)
        caret = self.caret.saved(message.node)
        if caret is None:
            self.navigation.show_node(message.node)
            if message.then_generate:
                self.generation.generate_when_idle()
        else:  # where the user left the caret in that session
            self.navigation.show_node(message.node, caret)
        self.say_where()

    def say_where(self) -> None:
        """Name the session now open, and the one 'Back to previous session' returns to."""
        back = ""
        if self.previous is not None:
            back = f"; 'Back to previous session' returns to {name_of(self.previous)!r}"
        self.app.notify(f"Now in session {self.app.session_name!r}{back}", timeout=5)

    def previewed(self, message: Sessions.Previewed) -> None:
        """A session on a model not in memory: on the screen at once (its file's
        preview), its model loading in the background as at start; what needs the
        model waits for it, in order. If it cannot load, the session left is opened
        again (:meth:`load_failed`)."""
        opening: SessionOpening = message.opening
        before = self.previous
        old, old_path = self.let_go_of_open(opening.path)
        self.fallback = (old, old_path, before)
        self.app.swap.open_preview(opening, message.name)
        self.say_where()

    def load_failed(self, error: BaseException) -> bool:
        """The model of a session switched to did not load: say why and go back to the
        session left (a new one on its model if that one is gone). False when no switch
        was loading (the start's own load: the editor ends with the error)."""
        if self.fallback is None:
            return False
        old, old_path, self.previous = self.fallback  # as if it had never been left
        self.fallback = None
        app = self.app
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        app.notify(f"cannot open that session: {text}", severity="error", timeout=8)

        def job() -> None:
            if old_path is not None and old_path.exists():
                new = sessions.open_in_place(old, old_path, progress=self.progress.report)
                app.post_message(Sessions.Switched(new, name_of(old_path), new.cursor, False))
            else:
                name = sessions.new_name()
                new = sessions.create_like(old, name)
                app.post_message(Sessions.Switched(new, name, new.root, False))

        self.jobs.submit("session", job, lock=True)
        return True
