"""How the editor looks and which keys it answers to: loomterm's themes (bundled and the
user's, one Theme command), the user's key map, and the rows of the help screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.binding import Binding
from textual.theme import BUILTIN_THEMES

from loomterm.config.keymap import KeymapError, load_keymap
from loomterm.tui.key_order import set_keymap
from loomterm.tui.keymap import ACTION_BY_ID, ACTIONS
from loomterm.tui.prefs import save_prefs
from loomterm.tui.themes import DEFAULT_THEME, load_themes
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.help import HelpRow

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor


# What the branch pane's rows show besides text: the help screen explains them.
MARKS = (
    ("[2]", "Branches", "The text goes on in that many ways below this row."),
    (
        "(3 nodes)",
        "Folded run",
        "Nodes with one way on each, shown as one row: first … last words.",
    ),
    (
        "~",
        "Approximate",
        "Its keys were moved by a fast splice; Recompute exactly (f8) makes them exact.",
    ),
    ("\u23ce", "Line break", "A line break in the row's text (the row is one line)."),
    ("\u2205", "No text", "A node with nothing to show: an end-of-text token, or an empty edit."),
)


@dataclass(eq=False, repr=False)
class Looks:
    """Themes, the key map in use (``keymap``: action id to keys) and the help rows."""

    app: Editor
    # the user's key map, as applied
    keymap: dict[str, str] = field(default_factory=dict, init=False)

    def load_themes(self) -> None:
        """Register loomterm's themes (bundled, then the user's) and use the one in
        the prefs; problems with the user's theme files are notifications."""
        app = self.app
        themes, problems = load_themes()
        for theme in themes:
            app.register_theme(theme)
        for problem in problems:
            app.notify(problem, severity="warning")
        wanted = app.prefs.theme
        ours = {theme.name for theme in themes}
        app.theme = wanted if wanted in ours else DEFAULT_THEME
        # Only loomterm's themes (bundled, then the user's): Textual's own built-in
        # themes leave the document's colours at their defaults.
        for name in list(BUILTIN_THEMES):
            if name not in ours:
                app.unregister_theme(name)
        app.theme_changed_signal.subscribe(app, self.theme_changed)

    def theme_names(self) -> list[str]:
        """The themes to offer, loomterm's bundled ones first, then the user's."""
        names = list(self.app.available_themes)
        return sorted(names, key=lambda name: (not name.startswith("loom-"), name))

    def search_themes(self) -> None:
        """The one Theme command: a palette of loomterm's themes (:meth:`theme_names`)."""
        from textual.command import CommandPalette

        from loomterm.tui.commands import ThemeCommands

        self.app.push_screen(
            CommandPalette(providers=[ThemeCommands], placeholder="Search for themes\u2026")
        )

    def theme_changed(self, theme: Any) -> None:
        """The theme changed (the palette, a command): remembered in the prefs."""
        self.app.prefs.theme = theme.name
        save_prefs(self.app.prefs)

    def load_keymap(self) -> None:
        """Apply the user's key map; unknown ids and unreadable files are reported."""
        app = self.app
        try:
            keymap = load_keymap()
        except KeymapError as exc:
            app.notify(str(exc), severity="error", timeout=8)
            return
        known = {action.id for action in ACTIONS} | {
            b.id for b in DocumentView.BINDINGS if isinstance(b, Binding) and b.id
        }
        unknown = sorted(set(keymap) - known)
        if unknown:
            app.notify(f"key map: unknown action ids {', '.join(unknown)}", severity="warning")
        self.keymap = {k: v for k, v in keymap.items() if k in known}
        set_keymap(app, self.keymap)

    def keys_by_id(self) -> dict[str, str]:
        """The key (as displayed) that runs each action now, key map applied."""
        keys = {}
        keymap = self.keymap
        for action in ACTIONS:
            key = keymap.get(action.id, action.key)
            if key:
                first = key.split(",")[0].strip()
                keys[action.id] = self.app.get_key_display(Binding(first, action.action))
        return keys

    def key_name(self, action_id: str) -> str:
        """The first key bound to ``action_id`` as written in a key map (``ctrl+g``)."""
        keymap = self.keymap
        action = ACTION_BY_ID[action_id]
        return keymap.get(action_id, action.key).split(",")[0].strip()

    def start_hint(self) -> str:
        """The first screen of an empty session: how to begin, in one line."""
        generate = self.key_name("generate") or "the Generate command"
        help_key = self.key_name("help") or "ctrl+p"
        return f"Type, then press {generate} to let the model go on \u00b7 {help_key} help"

    def key_for(self, action_id: str) -> str:
        """The key that runs ``action_id`` now, or "the palette"."""
        return self.keys_by_id().get(action_id, "the palette")

    def help_rows(self) -> list[HelpRow]:
        """Every key and action for the help screen: keys as a key map writes them,
        beside the action id that remaps them."""
        keymap = self.keymap

        def written(keys: str) -> str:
            return ", ".join(k.strip() for k in keys.split(",") if k.strip())

        rows: list[HelpRow] = [
            (
                action.group,
                written(keymap.get(action.id, action.key)) or "(palette)",
                action.id,
                action.title,
                action.help,
            )
            for action in ACTIONS
        ]
        rows.append(
            ("Palette", "ctrl+p", "", "Command palette", "Find any action, theme or bookmark.")
        )
        for binding in DocumentView.BINDINGS:
            assert isinstance(binding, Binding)
            key = keymap.get(binding.id or "", binding.key)
            rows.append(
                ("Edit", written(key), binding.id or "", binding.description, "In the text.")
            )
        rows.append(
            (
                "Edit",
                "type / paste",
                "",
                "Edit",
                "Text changes at once; the engine catches up when typing pauses.",
            )
        )
        rows.append(
            (
                "Edit",
                "right-click",
                "",
                "Alternatives",
                "Right-click, ctrl+click or double-click a token for its alternatives.",
            )
        )
        rows.extend(("Branch pane marks", mark, "", title, text) for mark, title, text in MARKS)
        return rows
