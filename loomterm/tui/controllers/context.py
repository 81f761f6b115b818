"""Memory, author's note and world info in the editor: the dialog that edits them
(kept with the session as settings) and the context view, which shows exactly what
the model sees for the document's path, the injected parts marked. The normal view
shows the document only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

from loomterm.engine.context import PATH
from loomterm.errors import LoomError
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.widgets.context import ContextScreen, Run

if TYPE_CHECKING:
    from loomterm.tree import Node
    from loomterm.tui.controllers.swap import Swap


@dataclass
class ContextAssembled(Message):
    """What the model sees, assembled by the worker (or why it cannot be)."""

    runs: list[Run]
    problem: str = ""


# Loom events after which what the model sees may have changed.
CONTEXT_EVENTS = frozenset({"settings", "cursor", "add", "split", "done"})


@dataclass(eq=False, repr=False)
class Context(Controller):
    """The context dialog and the context view."""

    # a refresh is in the worker's queue: one is enough
    queued: bool = field(default=False, init=False)

    @key_action("context_dialog")
    def ask(self) -> None:
        """The memory, author's note and world info dialog."""
        app = self.app

        def saved(values: dict[str, Any] | None) -> None:
            if not values:
                return
            try:
                app.loom.update_settings(**values)
            except LoomError as exc:
                app.notify(str(exc), severity="error")
                return
            app.notify("Memory, author's note and world info saved with the session", timeout=3)
            self.refresh()

        app.push_screen(ContextScreen(app.loom.settings), saved)

    @property
    def shown(self) -> bool:
        """The context view is shown (in place of the document)."""
        return not self.app.context_view.has_class("-hidden")

    @key_action("toggle_context_view")
    def toggle(self) -> None:
        """Show what the model sees instead of the document, or the document again."""
        app = self.app
        shown = not self.shown
        app.context_view.set_class(not shown, "-hidden")
        app.view.display = not shown
        if shown:
            self.refresh()
            app.context_view.focus()
        else:
            app.view.focus()

    def runs(self, node: Node) -> list[Run]:
        """What the model sees for ``node``'s path, run by run (on the engine worker)."""
        loom = self.app.loom
        tokens = node.path_tokens()
        runs = []
        for piece in loom.context_layout(node).pieces:  # the plain path's window, if no text
            ids = tokens[piece.lo : piece.hi] if piece.kind == PATH else list(piece.tokens)
            runs.append(Run(piece.kind, loom.decode(ids), len(ids)))
        return runs

    def refresh(self) -> None:
        """Assemble what the model sees in the engine worker (it encodes text, so it
        waits for a running generation); the view shows it when it comes back."""
        if not self.shown or self.queued:
            return
        self.queued = True
        app = self.app
        loom = app.loom

        def job() -> None:
            runs: list[Run] = []
            problem = ""
            try:
                with loom.exclusive():
                    runs = self.runs(app.doc.node or loom.root)
            except LoomError as exc:
                problem = str(exc)
            finally:  # always answered, so the next change refreshes again
                app.post_message(ContextAssembled(runs, problem))

        self.jobs.submit("context", job)

    def assembled(self, message: ContextAssembled) -> None:
        self.queued = False
        if message.problem:
            self.app.context_view.show_problem(message.problem)
        else:
            self.app.context_view.show(message.runs)

    def loom_changed(self, message: Swap.LoomChanged) -> None:
        """What the model sees may have changed: refresh the view if it is shown."""
        if message.event in CONTEXT_EVENTS and self.shown:
            self.refresh()
