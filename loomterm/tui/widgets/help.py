"""The help screen: every key and what it does, as the user's key map has it, with each
action's id beside its keys (the id is what ``keymap.toml`` remaps)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Label

from loomterm.tui.widgets.dialogs import DialogScreen, dialog_css, dialog_title

HelpRow = tuple[str, str, str, str, str]  # (group, keys, action id, title, help)
KEY_WIDTH = 15  # "alt+shift+right"
ID_WIDTH = 17  # "toggle_boundaries"; wider when a row's id is longer (never wrapped)


class HelpScreen(DialogScreen[None]):
    """A table of keys, a heading per group. Rows come from the app (so remapped keys
    show as remapped)."""

    DEFAULT_CSS = dialog_css(
        "HelpScreen",
        """
        & > Vertical { width: 96%; max-width: 120; height: 100%; max-height: 40; padding: 0 1; }
        & .dialog--title { margin-bottom: 0; }
        & .dialog--hint { margin-top: 0; }
        & DataTable { height: 1fr; min-height: 3; }
    """,
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
            yield dialog_title("loomterm keys")
            yield DataTable(zebra_stripes=True, cursor_type="row")
            where = self.where or "keymap.toml in the config folder"
            hint = f"escape closes \u00b7 remap by action id: {where}"
            yield Label(hint, classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # Fixed widths, so the description wraps (rows grow to fit) instead of running off.
        dialog = min(int(self.app.size.width * 0.96), 120)
        inner = dialog - 4  # thick border and padding
        id_width = max([ID_WIDTH, *(len(row[2]) for row in self.rows)])
        text_width = inner - 2 - 3 * 2 - KEY_WIDTH - id_width  # scrollbar, cell padding
        narrow = text_width < 24  # then the id goes under the keys, in one column
        if narrow:
            text_width = max(12, inner - 2 - 2 * 2 - ID_WIDTH)
            table.add_column("Key / id", width=ID_WIDTH, key="keys")
        else:
            table.add_column("Key", width=KEY_WIDTH, key="keys")
            table.add_column("Action id", width=id_width, key="id")
        table.add_column("What it does", width=text_width, key="what")
        previous = ""
        for group, keys, action_id, title, text in self.rows:
            if group != previous:
                blanks = len(table.columns) - 1
                table.add_row(Text(group, style="bold"), *(Text() for _ in range(blanks)), height=1)
                previous = group
            # Cells as Text, never str: a table reads a str cell as markup.
            what = Text.assemble((title, "bold"), " \u2014 ", text)
            ident = Text(action_id, style="italic")
            cells = (
                [Text.assemble(keys, "\n", ident), what] if narrow else [Text(keys), ident, what]
            )
            table.add_row(*(cell.copy() for cell in cells), height=None)
        table.focus()

    def action_close(self) -> None:
        self.dismiss(None)
