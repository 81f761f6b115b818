"""Nothing typed is lost: the editor's side of keeping the writer's work.

- While the model loads, the document takes typing that no model can read yet: each
  edit is written at once into the session file as the text typed
  (``SessionOpening.record_typed``), so a kill, a model that fails to load or a server
  that never answers leaves it in a session the writer can reopen.
- A session opened with such text puts it back on the screen, to be read in by the
  model as any other typing (the file drops it once the tree holds it).
- Quitting while the model loads leaves at once: the typing is written, the load is
  abandoned (``SessionOpening.abandon``), the editor does not wait for it.
- Quitting while the model works (generating, reading) writes the text it has not
  read yet the same way (:meth:`Keeping.keep_unread`); if its job does not stop in
  time the session is closed beside it (:meth:`Keeping.close_for_exit`).
- A session file that cannot be written (a full disk, a folder made read-only or
  removed) is said in the status bar for as long as it lasts (:meth:`Keeping.saving`),
  not in a toast: the recorder keeps every change in a journal and tries again
  (``loomterm.sessions.recorder``); "Save session elsewhere" writes it all to another path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.errors import LoomError
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.sanitize import safe_line

if TYPE_CHECKING:
    from loomterm.tui.controllers.lifecycle import Lifecycle


class SaveStateChanged(Message):
    """The session file failed to take a write, or took one again (any thread)."""


@dataclass
class SavedElsewhere(Message):
    """The session was written to another path, which records it from now on."""

    path: None


@dataclass(eq=False, repr=False)
class Keeping(Controller):
    """Typing kept before the model is there, quitting while it loads, and saving that
    fails."""

    lifecycle: Lifecycle
    # why the typed text could not be written, if it could not
    problem: str = field(default="", init=False)
    # ids of the recorders this editor listens to
    _heard: set[int] = field(default_factory=set, init=False)

    def saving(self) -> str:
        """What the status bar says while the changes do not reach the session file
        ("" while they do): why, where they are kept meanwhile, and what to do."""
        from loomterm.sessions.session import session_of

        if self.problem:
            return f"NOT SAVED \u00b7 {safe_line(self.problem)}"
        session = session_of(self.app.loom)
        if session is None or session.read_only:
            return ""
        recorder = session.recorder
        if id(recorder) not in self._heard:
            self._heard.add(id(recorder))
            recorder.watch(lambda _state: self.app.post_message(SaveStateChanged()))
        state = recorder.state
        if state.ok:
            return ""
        if state.journal is not None:
            kept = f"kept in {state.journal}"
        else:
            kept = f"kept in memory only ({state.journal_error})"
        return (
            f"NOT SAVED \u00b7 {safe_line(state.error)} \u00b7 {safe_line(kept)} \u00b7 retrying"
            " \u00b7 ctrl+p: save elsewhere"
        )

    @key_action()
    def save_elsewhere(self) -> None:
        """Ask for another name or path, and write the whole session there (it is
        recorded there from then on; the old file keeps its journal)."""
        from loomterm.tui.widgets.dialogs import NameScreen

        app = self.app
        title = "Save the whole session to (a session name, or a path such as /mnt/usb/story.loom)"
        name = f"{app.session_name or 'session'}-saved"
        app.push_screen(NameScreen(title, name, "Save"), self._save_to)

    def _save_to(self, target: str | None) -> None:
        from loomterm.sessions.session import save_elsewhere

        if not target:
            return
        app = self.app
        loom = app.loom

        def job() -> None:
            path = save_elsewhere(loom, target)
            app.post_message(SavedElsewhere(path))

        self.jobs.submit("save elsewhere", job)

    def saved_elsewhere(self, path) -> None:
        """The session is recorded at ``path`` now."""
        from loomterm.store import SESSION_SUFFIX

        app = self.app
        app.session_name = path.name.removesuffix(SESSION_SUFFIX)
        app.status_line.show_title()
        app.notify(f"Saved to {safe_line(str(path))}", timeout=5)
        app.status_line.soon()

    def edited(self) -> None:
        """The document changed: while the model loads, write the text to the file."""
        app = self.app
        loader = app.loader
        if loader is None:
            return
        if self.lifecycle.read_only:  # nothing is written: quitting offers to save it
            self.lifecycle.note_change()
            return
        base = app.doc.node or app.loom.root
        try:
            loader.opening.record_typed(base.id, app.doc.text)
        except LoomError as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if text != self.problem:
                self.problem = text
                app.status_line.soon()
            return
        if self.problem:
            self.problem = ""
            app.status_line.soon()

    def restore(self) -> None:
        """The session just opened keeps text typed before its model read it: show it
        again, as typing the model will read."""
        from loomterm.sessions.session import typed_before_load

        app = self.app
        loader = app.loader
        typed = loader.opening.typed if loader is not None else typed_before_load(app.loom)
        if typed is None or not typed.text:
            return
        node = app.loom.tree.nodes.get(typed.node, app.loom.root)
        doc = app.doc
        doc.show(node)
        if doc.text == typed.text:
            return
        doc.become(typed.text)
        doc.move_to(len(doc.text))
        app.lifecycle.note_change()
        app.typing.sync_now()

    def keep_unread(self) -> None:
        """Quitting: the document's text that the model has not read yet goes into the
        session file now, as text typed before the model read it (a reopened session
        shows it again, to be read); dropped again once the model has read it."""
        from loomterm.sessions.session import session_of
        from loomterm.store import Typed

        app = self.app
        session = session_of(app.loom)
        if session is None or session.read_only or not app.typing.waiting():
            return
        base = app.doc.node or app.loom.root
        session.recorder.keep_typed(Typed(base.id, app.doc.text))

    def all_read(self) -> None:
        """Quitting with the engine idle and the document read: the file keeps no
        typing (the tree holds it all)."""
        from loomterm.sessions.session import session_of

        session = session_of(self.app.loom)  # as keep_unread writes it, dropped
        if self.lifecycle.read_only or session is None or session.recorder.typed is None:
            return
        session.recorder.keep_typed(None)

    def close_for_exit(self) -> None:
        """Leaving while the engine's job still runs: close the session now (buffered
        tokens written; no KV snapshot, which would wait for the engine), so that the
        command can leave the process without it."""
        from loomterm.sessions.session import session_of

        session = session_of(self.app.loom)
        if session is not None and not session.closed:
            session.recorder.close(quiet=True, snapshot=False)

    def quit_while_loading(self) -> None:
        """ctrl+q before the model is there: write the typing (keys typed just ahead
        of ctrl+q first), abandon the load and leave at once."""
        app = self.app
        loader = app.loader

        def leave() -> None:
            self.edited()
            if loader is not None:
                loader.opening.abandon()
            self.lifecycle.finish(ask=False)

        app.view.after_input(leave)
