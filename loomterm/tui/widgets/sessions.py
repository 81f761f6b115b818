"""The session picker: every saved session with its model, size and last change; open,
create, rename and delete them without leaving the editor.

Renaming or deleting a session that is not open is a file operation, done here at once.
Opening one, creating one, and renaming the open one replace the editor's session,
which is the app's work: the picker dismisses with a :class:`SessionChoice`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Label

from loomterm.errors import LoomError
from loomterm.tui import sessions
from loomterm.tui.sanitize import plain_text, safe_line, safe_text
from loomterm.tui.sessions import SessionRow
from loomterm.tui.widgets.dialogs import (
    ConfirmScreen,
    DialogScreen,
    NameScreen,
    dialog_css,
    dialog_title,
)
from loomterm.tui.widgets.status_bar import human_bytes


@dataclass(frozen=True)
class SessionChoice:
    """What the picker asks the app to do: ``open`` the session at ``path``, make a
    ``new`` one named ``name``, or ``rename`` the open one (at ``path``) to ``name``."""

    kind: str
    path: Path | None = None
    name: str = ""


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M") if seconds else "?"


class SessionsScreen(DialogScreen["SessionChoice | None"]):
    """The saved sessions, newest change first; the open one is marked ``●``."""

    DEFAULT_CSS = dialog_css(
        "SessionsScreen",
        """
        & > Vertical { width: 96%; max-width: 110; height: auto; max-height: 94%; }
        & DataTable { height: auto; max-height: 20; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="sessions_close"),
        # Not priority: the table's own enter (RowSelected) runs after the keys before
        # it, so a quick down, enter opens the row down moved to.
        Binding("enter", "open", "Open", id="sessions_open"),
        Binding("n", "new", "New", id="sessions_new"),
        Binding("r", "rename", "Rename", id="sessions_rename"),
        Binding("d,delete", "delete", "Delete", id="sessions_delete"),
    ]

    def __init__(
        self,
        current: Path | None,
        rows: Callable[[], list[SessionRow]] | None = None,
        hint: str = "",
    ) -> None:
        super().__init__()
        self.current = current
        self._rows_of = rows or (lambda: sessions.session_rows(current))
        self.rows: list[SessionRow] = []
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Sessions")
            yield DataTable(cursor_type="row", zebra_stripes=True, id="sessions")
            yield Label("", id="empty", classes="dialog--hint", markup=False)
            hint = "enter opens · n new · r rename · d delete · escape closes"
            if self.hint:
                hint = f"{self.hint}\n{hint}"
            yield Label(safe_text(hint), classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("", "Name", "Model", "Nodes", "Size", "Last change")
        self.reload()
        table.focus()

    def reload(self, select: Path | None = None) -> None:
        """Read the sessions again; keep the cursor on ``select`` (or the open one)."""
        table = self.query_one(DataTable)
        self.rows = self._rows_of()
        table.clear()
        chosen = 0
        for index, row in enumerate(self.rows):
            mark = "\u25cf" if row.current else ""
            if row.error:
                cells = (mark, safe_line(row.name), "(unreadable)", "", "", safe_line(row.error))
            else:
                cells = (
                    mark,
                    safe_line(row.name),
                    safe_line(row.model),
                    str(row.nodes),
                    human_bytes(row.size),
                    when(row.modified),
                )
            table.add_row(*(plain_text(cell) for cell in cells), key=str(index))
            target = select if select is not None else self.current
            if target is not None and row.path == target:
                chosen = index
        if self.rows:
            table.move_cursor(row=chosen)
        empty = self.query_one("#empty", Label)
        empty.update("No saved sessions yet: n makes one.")
        empty.display = not self.rows

    def _row(self) -> SessionRow | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        row = self._row()
        if row is None:
            return
        if row.current:
            self.dismiss(None)
        elif row.error:
            self.notify(f"{row.name}: {row.error}", severity="error")
        else:
            self.dismiss(SessionChoice("open", row.path))

    def action_new(self) -> None:
        def named(name: str | None) -> None:
            if name:
                self.dismiss(SessionChoice("new", name=name))

        screen = NameScreen("New session", sessions.new_name(), "Create", sessions.name_problem)
        self.app.push_screen(screen, named)

    def action_rename(self) -> None:
        row = self._row()
        if row is None:
            return

        def named(name: str | None) -> None:
            if not name or name == row.name:
                return
            if row.current:
                self.dismiss(SessionChoice("rename", row.path, name))
                return
            try:
                path = sessions.rename(row.path, name)
            except LoomError as exc:
                self.notify(str(exc), severity="error")
                return
            self.reload(select=path)

        def problem(name: str) -> str | None:
            return None if name == row.name else sessions.name_problem(name)

        self.app.push_screen(
            NameScreen(f"Rename {row.name!r} to", row.name, "Rename", problem), named
        )

    def action_delete(self) -> None:
        row = self._row()
        if row is None:
            return
        if row.current:
            self.notify("This session is open: open another one first", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            try:
                sessions.delete(row.path)
            except LoomError as exc:
                self.notify(str(exc), severity="error")
                return
            self.notify(f"Deleted session {row.name!r}", timeout=3)
            self.reload()

        what = f"{row.nodes} nodes, {human_bytes(row.size)}"
        self.app.push_screen(
            ConfirmScreen(
                f"Delete the session {row.name!r} ({what})? It cannot be undone.", yes="Delete"
            ),
            confirmed,
        )

    def action_close(self) -> None:
        self.dismiss(None)
