"""One user-facing action of the editor: its id, default key, the Textual action it
runs, and the words the footer, the help screen and the palette show for it.
``tui.keymap`` gathers every one into :data:`~loomterm.tui.keymap.ACTIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

# Bindings that must work whatever has focus (an Input in a dialog would eat them).
PRIORITY = frozenset({"quit"})


@dataclass(frozen=True)
class Action:
    """One user-facing action.

    Attributes:
        id: Stable id, used by key maps.
        key: Default key(s), or "" for palette-only actions.
        action: The Textual action string run on the app.
        title: Short name (footer, palette).
        help: One sentence for the help screen, palette and tooltip.
        footer: Show in the footer.
        group: Heading on the help screen.
        short: Footer label (default: the title).
    """

    id: str
    key: str
    action: str
    title: str
    help: str
    footer: bool = False
    group: str = "Generate"
    short: str = ""

    def binding(self) -> Binding:
        return Binding(
            self.key,
            self.action,
            self.short or self.title,
            show=self.footer,
            id=self.id,
            tooltip=self.help,
            priority=self.id in PRIORITY,
        )
