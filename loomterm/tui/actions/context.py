"""Memory, author's note and world info in the editor: the dialog that edits them
(kept with the session as settings) and the context view, which shows exactly what
the model sees for the document's path, the injected parts marked. The normal view
shows the document only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

from loomterm.engine.context import PATH
from loomterm.errors import LoomError
from loomterm.tui.messages import LoomChanged
from loomterm.tui.widgets.context import ContextScreen, Run

if TYPE_CHECKING:
    from loomterm.tree import Node
    from loomterm.tui.app import LoomApp


class ContextAssembled(Message):
    """What the model sees, assembled by the worker (or why it cannot be)."""

    def __init__(self, runs: list[Run], problem: str = "") -> None:
        super().__init__()
        self.runs = runs
        self.problem = problem


# Loom events after which what the model sees may have changed.
_CONTEXT_EVENTS = frozenset({"settings", "cursor", "add", "split", "done"})


class ContextActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: the context dialog and view."""

    _context_queued = False  # a refresh is in the worker's queue: one is enough

    def action_context_dialog(self: LoomApp) -> None:
        def saved(values: dict[str, Any] | None) -> None:
            if not values:
                return
            try:
                self.loom.update_settings(**values)
            except LoomError as exc:
                self.notify(str(exc), severity="error")
                return
            self.notify("Memory, author's note and world info saved with the session", timeout=3)
            self.refresh_context_view()

        self.push_screen(ContextScreen(self.loom.settings), saved)

    def action_regenerate_own_context(self: LoomApp) -> None:
        """Regenerate the generated node at the caret with the context it was made
        with (memory, author's note, world info of that time), not the current one."""
        self.jobs.when_idle(lambda: self._regenerate(own_context=True))

    @property
    def context_shown(self: LoomApp) -> bool:
        return not self.context_view.has_class("-hidden")

    def action_toggle_context_view(self: LoomApp) -> None:
        """Show what the model sees instead of the document, or the document again."""
        shown = not self.context_shown
        self.context_view.set_class(not shown, "-hidden")
        self.view.display = not shown
        if shown:
            self.refresh_context_view()
            self.context_view.focus()
        else:
            self.view.focus()

    def context_runs(self: LoomApp, node: Node) -> list[Run]:
        """What the model sees for ``node``'s path, run by run (on the engine worker)."""
        loom = self.loom
        tokens = node.path_tokens()
        runs = []
        for piece in loom.context_layout(node).pieces:  # the plain path's window, if no text
            ids = tokens[piece.lo : piece.hi] if piece.kind == PATH else list(piece.tokens)
            runs.append(Run(piece.kind, loom.decode(ids), len(ids)))
        return runs

    def refresh_context_view(self: LoomApp) -> None:
        """Assemble what the model sees in the engine worker (it encodes text, so it
        waits for a running generation); the view shows it when it comes back."""
        if not self.context_shown or self._context_queued:
            return
        self._context_queued = True
        loom = self.loom

        def job() -> None:
            runs: list[Run] = []
            problem = ""
            try:
                with loom.exclusive():
                    runs = self.context_runs(self.doc.node or loom.root)
            except LoomError as exc:
                problem = str(exc)
            finally:  # always answered, so the next change refreshes again
                self.post_message(ContextAssembled(runs, problem))

        self.jobs.submit("context", job)

    def on_context_assembled(self: LoomApp, message: ContextAssembled) -> None:
        self._context_queued = False
        if message.problem:
            self.context_view.show_problem(message.problem)
        else:
            self.context_view.show(message.runs)

    def on_loom_changed(self: LoomApp, message: LoomChanged) -> None:
        if message.event in _CONTEXT_EVENTS and self.context_shown:
            self.refresh_context_view()
