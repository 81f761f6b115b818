"""Memory, author's note and world info in the editor: the dialog that edits them
(kept with the session as settings) and the context view, which shows exactly what
the model sees for the document's path, the injected parts marked. The normal view
shows the document only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomterm.engine.context import PATH
from loomterm.errors import LoomError
from loomterm.tui.messages import LoomChanged
from loomterm.tui.widgets.context import ContextScreen, Run

if TYPE_CHECKING:
    from loomterm.tree import Node
    from loomterm.tui.app import LoomApp

# Loom events after which what the model sees may have changed.
_CONTEXT_EVENTS = frozenset({"settings", "cursor", "add", "split", "done"})


class ContextActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: the context dialog and view."""

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
        """What the model sees for ``node``'s path, run by run. Reads the tree without
        waiting for the engine (a generation may be running): paths only grow."""
        loom = self.loom
        tokens = node.path_tokens()
        made = loom.contexts.assemble(tokens, loom.context_spec(), loom.n_ctx)
        if made is None:
            return [Run(PATH, loom.decode(tokens), len(tokens))]
        runs = []
        for piece in made.pieces:
            ids = tokens[piece.lo : piece.hi] if piece.kind == PATH else list(piece.tokens)
            runs.append(Run(piece.kind, loom.decode(ids), len(ids)))
        return runs

    def refresh_context_view(self: LoomApp) -> None:
        if not self.context_shown:
            return
        node = self.doc.node or self.loom.root
        try:
            self.context_view.show(self.context_runs(node))
        except LoomError as exc:
            self.context_view.show_problem(str(exc))

    def on_loom_changed(self: LoomApp, message: LoomChanged) -> None:
        if message.event in _CONTEXT_EVENTS and self.context_shown:
            self.refresh_context_view()
