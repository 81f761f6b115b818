"""The help screen: every key and what it does, as the user's key map has it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from loomterm.tui.widgets.dialogs import DIALOG_CSS

HelpRow = tuple[str, str, str, str]  # (group, keys, title, help)


class HelpScreen(ModalScreen[None]):
    """A table of keys. Rows come from the app (so remapped keys show as remapped)."""

    DEFAULT_CSS = (
        "HelpScreen {"
        + DIALOG_CSS
        + """
        & > Vertical { width: 96%; max-width: 120; height: 94%; padding: 0 1; }
        & DataTable { height: 1fr; }
    }"""
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q", "close", "Close", id="help_close"),
    ]

    def __init__(self, rows: list[HelpRow], where: str = "") -> None:
        super().__init__()
        self.rows = rows
        self.where = where

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("loomterm keys", classes="dialog--title")
            yield DataTable(zebra_stripes=True, cursor_type="row")
            hint = "escape closes · ctrl+p finds any action by name"
            if self.where:
                hint += f" · remap keys in {self.where}"
            yield Label(hint, classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # Fixed widths so the description wraps (rows grow to fit) instead of running off.
        dialog = min(int(self.app.size.width * 0.96), 120)
        inner = dialog - 4  # thick border and padding
        text_width = max(24, inner - 2 - 4 * 2 - (8 + 12 + 22))  # scrollbar, cell padding
        table.add_column("", width=8)
        table.add_column("Key", width=12)
        table.add_column("Action", width=22)
        table.add_column("What it does", width=text_width)
        previous = ""
        for group, keys, title, text in self.rows:
            table.add_row(group if group != previous else "", keys, title, text, height=None)
            previous = group
        table.focus()

    def action_close(self) -> None:
        self.dismiss(None)
