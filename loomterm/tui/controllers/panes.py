"""What the screen shows: the branch pane (toggle, width, focus), the document's marks
(token boundaries, probabilities, surprisal, approximate tokens) and archived branches
shown or not, each remembered in the prefs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.tui.controllers.actions import key_action
from loomterm.tui.prefs import save_prefs

if TYPE_CHECKING:
    from textual.timer import Timer

    from loomterm.tree import Node
    from loomterm.tui.controllers.editor import Editor

TREE_STEP = 0.05  # alt+shift+left/right narrow or widen the branch pane by this share
TREE_SHARES = (0.1, 0.7)
TREE_DELAY = 0.15  # structural changes are batched this long before the pane rebuilds
# The view toggles' names, as their notes say them (the key table's titles).
VIEW_NAMES = {
    "boundaries": "Token boundaries",
    "probabilities": "Probability colours",
    "surprisal": "Surprisal view",
    "approx": "Approximate marks",
}


def tree_width(terminal: int, share: float) -> int:
    """The branch pane's width in cells for a terminal ``terminal`` cells wide: its share,
    but never so wide that the text gets less than half of a narrow terminal (or less
    than 24 cells), nor narrower than a few words."""
    low = max(8, min(20, terminal // 4))
    high = max(low, terminal - max(24, terminal // 2))
    return max(low, min(high, round(terminal * share)))


@dataclass(eq=False, repr=False)
class Panes:
    """The branch pane (its contents, width, focus) and the document's view toggles."""

    app: Editor
    # node_text's cache
    texts: dict[tuple[int, int, int], str] = field(default_factory=dict, init=False)
    tree_timer: Timer | None = field(default=None, init=False)

    @key_action()
    def focus_document(self) -> None:
        """Focus the document."""
        self.app.view.focus()

    def show_prefs(self) -> None:
        """The panes as the prefs remember them: the branch pane shown or hidden,
        archived branches shown or not, the document's marks and their legend."""
        app = self.app
        prefs, view = app.prefs, app.view
        app.branches.show_hidden = prefs.show_hidden
        if not prefs.tree:
            app.branches.add_class("-hidden")
        view.boundaries = prefs.boundaries
        view.probabilities = prefs.probabilities
        view.surprisal = prefs.surprisal
        view.approx_marks = prefs.approx
        app.shade_legend.show_view(view.surprisal, view.probabilities)

    def fit_tree(self, terminal: int | None = None) -> None:
        """Size the branch pane for the terminal's width (and the user's share)."""
        app = self.app
        terminal = terminal if terminal is not None else app.size.width
        if terminal > 0:
            app.branches.styles.width = tree_width(terminal, app.prefs.tree_share)

    @key_action()
    def tree_width(self, step: int) -> None:
        """Narrow (-1) or widen (+1) the branch pane; remembered."""
        prefs = self.app.prefs
        if self.app.branches.has_class("-hidden"):
            self.toggle_tree()
        low, high = TREE_SHARES
        share = round(prefs.tree_share + step * TREE_STEP, 2)
        if not low <= share <= high:  # the key would otherwise do nothing visible
            how = "narrow" if step < 0 else "wide"
            self.app.notify(f"The branch pane is as {how} as it goes", timeout=2)
        prefs.tree_share = max(low, min(high, share))
        save_prefs(prefs)
        self.fit_tree()

    @key_action()
    def toggle_tree(self) -> None:
        """Show or hide the branch pane; remembered."""
        app = self.app
        tree = app.branches
        tree.toggle_class("-hidden")
        app.prefs.tree = not tree.has_class("-hidden")
        save_prefs(app.prefs)
        if app.prefs.tree:
            self.rebuild_tree()
        elif app.focused is tree:
            app.view.focus()

    @key_action()
    def focus_tree(self) -> None:
        """Focus the branch pane (shown if hidden), or from it the document."""
        app = self.app
        tree = app.branches
        if app.focused is tree:
            app.view.focus()
            return
        if tree.has_class("-hidden"):
            self.toggle_tree()
        tree.focus()

    @key_action()
    def toggle_view(self, what: str) -> None:
        """Turn one of the document's marks on or off; remembered."""
        view, prefs = self.app.view, self.app.prefs
        if what == "boundaries":
            view.boundaries = prefs.boundaries = not view.boundaries
        elif what == "probabilities":
            view.probabilities = prefs.probabilities = not view.probabilities
        elif what == "surprisal":
            view.surprisal = prefs.surprisal = not view.surprisal
        elif what == "approx":
            view.approx_marks = prefs.approx = not view.approx_marks
        self.app.shade_legend.show_view(view.surprisal, view.probabilities)
        save_prefs(prefs)
        self.app.notify(self._view_note(what), timeout=2)

    def _view_note(self, what: str) -> str:
        """What a view key just did, in words: some marks show nothing on a document
        without them (no approximate tokens), so the key would otherwise look dead."""
        view = self.app.view
        on = {
            "boundaries": view.boundaries,
            "probabilities": view.probabilities,
            "surprisal": view.surprisal,
            "approx": view.approx_marks,
        }[what]
        name = VIEW_NAMES[what]
        if what != "approx" or not on:
            return f"{name}: {'on' if on else 'off'}"
        node = self.app.doc.node
        count = sum(1 for n in node.path() if n.approx) if node is not None else 0
        if not count:
            return f"{name}: on (no approximate tokens on this path)"
        return f"{name}: on ({count} approximate node{'' if count == 1 else 's'}; F8 recomputes)"

    @key_action()
    def toggle_hidden(self) -> None:
        """Show archived branches in the pane, or hide them again; remembered."""
        app = self.app
        tree = app.branches
        tree.show_hidden = app.prefs.show_hidden = not tree.show_hidden
        save_prefs(app.prefs)
        self.rebuild_tree()
        app.notify(
            "Showing archived branches" if tree.show_hidden else "Archived branches hidden",
            timeout=2,
        )

    # -- the branch pane's contents -------------------------------------------------
    def token_text(self, token: int) -> str:
        """One token's text on its own; a token holding part of a character shows its
        bytes (``\\xc3``) rather than a replacement character, a special token its
        written form (``<eos>``)."""
        return self.app.loom.codec.label(token)

    def node_text(self, node: Node) -> str:
        """A node's own text (for previews), cached per length and tokens (a split
        leaves its tail the node's id: the text it had at that length is not its text)."""
        key = (node.id, len(node.tokens), hash(tuple(node.tokens)))
        text = self.texts.get(key)
        if text is None:
            text = self.app.loom.decode(list(node.tokens))
            self.texts[key] = text
        return text

    def forget_texts(self) -> None:
        """Another Loom (or tokenizer) decodes from now on: the cached texts go."""
        self.texts.clear()

    def rebuild_tree_soon(self) -> None:
        """Rebuild the branch pane shortly (structural changes come in bursts)."""
        if self.tree_timer is None:
            self.tree_timer = self.app.set_timer(TREE_DELAY, self.rebuild_tree)

    def rebuild_tree(self) -> None:
        """Rebuild the branch pane now (unless it is hidden)."""
        self.tree_timer = None
        app = self.app
        app.hoist.mark_outside()  # a hoist read back on opening marks the text above it
        tree = app.branches
        if tree.has_class("-hidden"):
            return
        tree.rebuild(app.hoist.top())
        tree.set_path(app.doc.path, app.doc.node or app.loom.root)
