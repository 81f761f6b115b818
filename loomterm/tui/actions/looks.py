"""How the editor looks and which keys it answers to: loomterm's themes (bundled and the
user's, one Theme command), the user's key map, and the rows of the help screen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.theme import BUILTIN_THEMES

from loomterm.tui.keymap import ACTION_BY_ID, ACTIONS, KeymapError, load_keymap
from loomterm.tui.prefs import save_prefs
from loomterm.tui.themes import (
    DEFAULT_THEME,
    LOOM_DEFAULTS,
    load_themes,
    resolve_references,
    solidify,
)
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.help import HelpRow


class LookActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: themes, the key map, help rows."""

    # -- themes and keys -------------------------------------------------------------
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(LOOM_DEFAULTS)

    def get_css_variables(self) -> dict[str, str]:
        variables = solidify(resolve_references(super().get_css_variables()))
        self.theme_variables = variables
        return variables

    def _load_themes(self) -> None:
        themes, problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        for problem in problems:
            self.notify(problem, severity="warning")
        wanted = self.prefs.theme
        ours = {theme.name for theme in themes}
        self.theme = wanted if wanted in ours else DEFAULT_THEME
        # Only loomterm's themes (bundled, then the user's): Textual's own built-in
        # themes leave the document's colours at their defaults.
        for name in list(BUILTIN_THEMES):
            if name not in ours:
                self.unregister_theme(name)
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def theme_names(self) -> list[str]:
        """The themes to offer, loomterm's bundled ones first, then the user's."""
        names = list(self.available_themes)
        return sorted(names, key=lambda name: (not name.startswith("loom-"), name))

    def search_themes(self) -> None:
        """The one Theme command: a palette of the themes in :meth:`theme_names` order."""
        from textual.command import CommandPalette

        from loomterm.tui.commands import ThemeCommands

        self.push_screen(
            CommandPalette(providers=[ThemeCommands], placeholder="Search for themes\u2026")
        )

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's system commands but its Theme (loomterm's own Theme replaces it)."""
        for command in super().get_system_commands(screen):
            if command.title != "Theme":
                yield command

    def _theme_changed(self, theme: Any) -> None:
        self.prefs.theme = theme.name
        save_prefs(self.prefs)

    def set_theme(self, name: str) -> None:
        self.theme = name

    def _load_keymap(self) -> None:
        try:
            keymap = load_keymap()
        except KeymapError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return
        known = {action.id for action in ACTIONS} | {
            b.id for b in DocumentView.BINDINGS if isinstance(b, Binding) and b.id
        }
        unknown = sorted(set(keymap) - known)
        if unknown:
            self.notify(f"key map: unknown action ids {', '.join(unknown)}", severity="warning")
        self.set_keymap({k: v for k, v in keymap.items() if k in known})

    def keys_by_id(self) -> dict[str, str]:
        """The key (as displayed) that runs each action now, key map applied."""
        keys = {}
        keymap = getattr(self, "_keymap", {}) or {}
        for action in ACTIONS:
            key = keymap.get(action.id, action.key)
            if key:
                first = key.split(",")[0].strip()
                keys[action.id] = self.get_key_display(Binding(first, action.action))
        return keys

    def key_name(self, action_id: str) -> str:
        """The first key bound to ``action_id`` as written in a key map (``ctrl+g``)."""
        keymap = getattr(self, "_keymap", {}) or {}
        action = ACTION_BY_ID[action_id]
        return keymap.get(action_id, action.key).split(",")[0].strip()

    def start_hint(self) -> str:
        """The first screen of an empty session: how to begin, in one line."""
        generate = self.key_name("generate") or "the Generate command"
        help_key = self.key_name("help") or "ctrl+p"
        return f"Type, then press {generate} to let the model go on \u00b7 {help_key} help"

    def _key_for(self, action_id: str) -> str:
        """The key that runs ``action_id`` now, or "the palette"."""
        return self.keys_by_id().get(action_id, "the palette")

    def help_rows(self) -> list[HelpRow]:
        """Every key and action for the help screen: keys as a key map writes them,
        beside the action id that remaps them."""
        keymap = getattr(self, "_keymap", {}) or {}

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
        return rows
