"""What the screen shows: the branch pane (toggle, focus), the document's marks
(token boundaries, probabilities, approximate tokens), archived branches shown or not
(each remembered in the prefs), and the settings, export and help dialogs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loomterm.errors import LoomError
from loomterm.tui import defaults, ops
from loomterm.tui.keymap import keymap_path
from loomterm.tui.messages import Exported
from loomterm.tui.prefs import save_prefs
from loomterm.tui.widgets.export_dialog import ExportScreen
from loomterm.tui.widgets.help import HelpScreen
from loomterm.tui.widgets.settings import SettingsScreen, unavailable_settings

TREE_STEP = 0.05  # alt+shift+left/right narrow or widen the branch pane by this share
TREE_SHARES = (0.1, 0.7)


def tree_width(terminal: int, share: float) -> int:
    """The branch pane's width in cells for a terminal ``terminal`` cells wide: its share,
    but never so wide that the text gets less than half of a narrow terminal (or less
    than 24 cells), nor narrower than a few words."""
    low = max(8, min(20, terminal // 4))
    high = max(low, terminal - max(24, terminal // 2))
    return max(low, min(high, round(terminal * share)))


class ViewActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: panes, view toggles, dialogs."""

    def fit_tree(self, terminal: int | None = None) -> None:
        """Size the branch pane for the terminal's width (and the user's share)."""
        terminal = terminal if terminal is not None else self.size.width
        if terminal > 0:
            self.branches.styles.width = tree_width(terminal, self.prefs.tree_share)

    def action_tree_width(self, step: int) -> None:
        """Narrow (-1) or widen (+1) the branch pane; remembered."""
        if self.branches.has_class("-hidden"):
            self.action_toggle_tree()
        low, high = TREE_SHARES
        share = round(self.prefs.tree_share + step * TREE_STEP, 2)
        self.prefs.tree_share = max(low, min(high, share))
        save_prefs(self.prefs)
        self.fit_tree()

    def action_toggle_tree(self) -> None:
        tree = self.branches
        tree.toggle_class("-hidden")
        self.prefs.tree = not tree.has_class("-hidden")
        save_prefs(self.prefs)
        if self.prefs.tree:
            self._rebuild_tree()
        elif self.focused is tree:
            self.view.focus()

    def action_focus_tree(self) -> None:
        tree = self.branches
        if self.focused is tree:
            self.view.focus()
            return
        if tree.has_class("-hidden"):
            self.action_toggle_tree()
        tree.focus()

    def action_focus_document(self) -> None:
        self.view.focus()

    def action_toggle_view(self, what: str) -> None:
        view = self.view
        if what == "boundaries":
            view.boundaries = self.prefs.boundaries = not view.boundaries
        elif what == "probabilities":
            view.probabilities = self.prefs.probabilities = not view.probabilities
        elif what == "surprisal":
            view.surprisal = self.prefs.surprisal = not view.surprisal
        elif what == "approx":
            view.approx_marks = self.prefs.approx = not view.approx_marks
        self.shade_legend.show_view(view.surprisal, view.probabilities)
        save_prefs(self.prefs)

    def action_toggle_hidden(self) -> None:
        tree = self.branches
        tree.show_hidden = self.prefs.show_hidden = not tree.show_hidden
        save_prefs(self.prefs)
        self._rebuild_tree()
        self.notify(
            "Showing archived branches" if tree.show_hidden else "Archived branches hidden",
            timeout=2,
        )

    def action_settings(self) -> None:
        def saved(values: dict[str, Any] | None) -> None:
            if values is None:
                return  # cancelled
            if not values:
                self.notify("No setting changed", timeout=2)
                return
            self.loom.update_settings(**values)
            self._refresh_status()
            self.notify("Settings saved with the session", timeout=2)

        self.push_screen(
            SettingsScreen(
                self.loom.settings.as_dict(),
                defaults.sources(self.loom),
                unavailable_settings(self.loom.capabilities),
            ),
            saved,
        )

    def action_export(self) -> None:
        """The export dialog, opening on the folder, format and branches of the last
        export of this editor run (the first time: the current folder, Markdown, the
        current path)."""
        from loomterm.export import FORMATS

        last = self.last_export
        folder = Path(last.path).parent if last else self.export_dir or Path.cwd()
        stem = self.session_name or "loomterm"
        fmt, branch = (last.fmt, last.branch) if last else ("md", "current")
        self.push_screen(ExportScreen(FORMATS, folder, stem, fmt, branch))

    def on_export_screen_requested(self, message: ExportScreen.Requested) -> None:
        request = message.request
        loom = self.loom

        def job() -> None:
            try:
                ops.export_session(loom, request.path, request.fmt, request.branch)
            except LoomError as exc:  # a missing folder, say: said in the dialog
                self.post_message(Exported(request, str(exc)))
            else:
                self.post_message(Exported(request))

        self.when_idle(lambda: self.submit("export", job))

    def on_exported(self, message: Exported) -> None:
        request = message.request
        dialog = self.screen if isinstance(self.screen, ExportScreen) else None
        if message.error:
            if dialog is not None:
                dialog.finished(message.error)
            else:
                self.notify(message.error, severity="error", timeout=6)
            return
        self.last_export = request
        if dialog is not None:
            dialog.finished()
        self.notify(f"Exported {request.fmt} to {request.path}", timeout=4)

    def action_help(self) -> None:
        where = keymap_path()
        self.push_screen(HelpScreen(self.help_rows(), str(where) if where else ""))
