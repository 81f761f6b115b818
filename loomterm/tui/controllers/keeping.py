"""Nothing typed is lost: the editor's side of keeping the writer's work.

- While the model loads, the document takes typing that no model can read yet: each
  edit is written at once into the session file as the text typed
  (``SessionOpening.record_typed``), so a kill, a model that fails to load or a server
  that never answers leaves it in a session the writer can reopen.
- A session opened with such text puts it back on the screen, to be read in by the
  model as any other typing (the file drops it once the tree holds it).
- Quitting while the model loads leaves at once: the typing is written, the load is
  abandoned (``SessionOpening.abandon``), the editor does not wait for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loomterm.errors import LoomError

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.lifecycle import Lifecycle


class Keeping:
    """Typing kept before the model is there, and quitting while it loads."""

    def __init__(self, app: Editor, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle
        self.problem = ""  # why the typed text could not be written, if it could not

    def edited(self) -> None:
        """The document changed: while the model loads, write the text to the file."""
        app = self.app
        loader = app.loader
        if loader is None:
            return
        base = app.doc.node or app.loom.root
        try:
            loader.opening.record_typed(base.id, app.doc.text)
        except LoomError as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if text != self.problem:
                self.problem = text
                app.refresh_status_soon()
            return
        if self.problem:
            self.problem = ""
            app.refresh_status_soon()

    def restore(self) -> None:
        """The session just opened keeps text typed before its model read it: show it
        again, as typing the model will read."""
        from loomterm.session import typed_before_load

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
        app.note_change()
        app.sync_now()

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
