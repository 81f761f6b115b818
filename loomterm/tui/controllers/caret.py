"""The caret as part of the session: where the user left it comes back on reopening.

The session records the caret beside its cursor (``Session.record_caret``: a character
offset into the cursor path's text, see ``loomterm.store.Caret``). Writing it on every
keystroke would cost a transaction per arrow key, so the editor reports it when it has
settled: ``CARET_DELAY`` after the last status refresh (every caret move, edit and job
refreshes the status), once no job is in flight and the text is synced, and at once
before quitting or switching sessions. A hard kill within that delay of the last move
loses only that move (the caret comes back where it last settled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tree import Node
from loomterm.tui.controllers.controller import Controller

if TYPE_CHECKING:
    from textual.timer import Timer


CARET_DELAY = 1.0  # seconds the caret must rest before it is written


@dataclass(eq=False, repr=False)
class Caret(Controller):
    """Reporting the caret to the session, and finding where it was left."""

    timer: Timer | None = field(default=None, init=False)  # runs once the caret has rested

    def saved(self, node: Node) -> int | None:
        """Where the caret was left in ``node``'s path in this loom's session (None:
        nowhere recorded, or the end). Not clamped: ``DocumentModel.move_to`` clamps it
        to the text shown, which may be shorter if the file changed meanwhile."""
        from loomterm.sessions.session import saved_caret

        return saved_caret(self.app.loom, node)

    def place_saved(self, node: Node) -> None:
        """Put the caret where it was left in the shown path of ``node`` (else at its
        end)."""
        doc = self.app.doc
        char = self.saved(node)
        doc.move_to(doc.length if char is None else char)
        self.app.view.follow = doc.caret >= doc.length

    def soon(self) -> None:
        """Something moved: report the caret once it has rested ``CARET_DELAY``."""
        if self.timer is not None:
            self.timer.stop()
        self.timer = self.app.set_timer(CARET_DELAY, self.settled)

    def settled(self) -> None:
        self.timer = None
        if not self.jobs.busy:  # a job's end refreshes the status, which comes back here
            self.report()

    def report(self) -> None:
        """Tell the session where the caret is now, when the document shows the loom's
        cursor as the engine has it (typed text not yet synced has no place in the
        file: the caret recorded before stays)."""
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
        app = self.app
        doc = app.doc
        node = doc.node
        if node is None or node is not app.loom.cursor or doc.dirty:
            return
        from loomterm.sessions.session import record_caret

        record_caret(app.loom, node, None if doc.caret >= doc.length else doc.caret)
