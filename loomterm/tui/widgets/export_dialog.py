"""The export dialog: a format, a file, which branches, and (Markdown) whether to label
who wrote what. It stays open until the file is written: a failed export shows its
one-line reason in the dialog, with the typed path kept. A file that exists is replaced
only after a confirmation (exporting again to the same file, the button now saying
Replace); a session file is never replaced."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Checkbox, Input, Label, Select

from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.dialogs import FormScreen, dialog_css, dialog_title, form_bindings
from loomterm.tui.widgets.fields import Field

FORMAT_LABELS = {
    "md": "Markdown (the text as prose)",
    "txt": "Plain text",
    "json": "JSON tree (lossless, re-importable)",
    "html": "HTML page (self-contained)",
    "jsonl": "Preference pairs from ratings (JSON Lines)",
}
BRANCHES = (("current path", "current"), ("every branch", "all"))


@dataclass(frozen=True)
class ExportRequest:
    """One export: the format, the file and which branches (``current`` or ``all``);
    ``force``: the user confirmed replacing the file; ``attribution``: Markdown labels
    who wrote each part."""

    fmt: str
    path: str
    branch: str
    force: bool = False
    attribution: bool = False


class ExportScreen(FormScreen[None]):
    """Choose where and how to export. Posts :class:`ExportScreen.Requested` (the app
    writes the file in its worker) and stays open until :meth:`finished` says how it
    went: dismissed once written, or the reason shown in the dialog."""

    SUBMIT = "export"

    @dataclass
    class Requested(Message):
        """The user asked for ``request`` to be written."""

        request: ExportRequest

    DEFAULT_CSS = dialog_css(
        "ExportScreen",
        """
        & .export--row { height: 1; margin-bottom: 1; }
        & .export--row Label { width: 10; }
        & .export--row Input, & .export--row Select { width: 1fr; }
        & #export-status { width: 100%; height: auto; color: $error; display: none; }
        & #export-status.-working { color: $text-muted; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("export", "Export", "export_go")

    def __init__(
        self,
        formats: tuple[str, ...],
        folder: Path,
        stem: str,
        fmt: str = "md",
        branch: str = "current",
        attribution: bool = False,
    ) -> None:
        super().__init__()
        self.attribution = attribution
        self.confirming = ""  # a file that exists, shown; exporting to it again replaces it
        self.formats = formats
        self.folder = folder
        self.stem = stem or "loomterm"
        self.fmt = fmt if fmt in formats else formats[0]
        self.branch = branch if branch in {value for _, value in BRANCHES} else "current"
        self.working = False

    def _default_path(self, fmt: str) -> str:
        return str(self.folder / f"{self.stem}.{fmt}")

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Export")
            with Horizontal(classes="export--row"):
                yield Label("Format")
                yield Select(
                    [(FORMAT_LABELS.get(f, f), f) for f in self.formats],
                    value=self.fmt,
                    allow_blank=False,
                    id="format",
                    compact=True,
                )
            with Horizontal(classes="export--row"):
                yield Label("Branches")
                yield Select(
                    BRANCHES, value=self.branch, allow_blank=False, id="branch", compact=True
                )
            with Horizontal(classes="export--row"):
                yield Label("File")
                yield Field(
                    self._default_path(self.fmt), id="path", compact=True, select_on_focus=False
                )
            with Horizontal(classes="export--row"):
                yield Label("")
                yield Checkbox(
                    "Markdown: label who wrote each part",
                    self.attribution,
                    id="attribution",
                    compact=True,
                )
            yield Label("", id="export-status", markup=False)
            yield self.buttons("Export")
            yield Label(
                "ctrl+s exports (or enter in the file name) · tab moves · escape cancels",
                classes="dialog--hint",
            )

    def on_mount(self) -> None:
        # The format first: the path is edited deliberately (tab), never replaced by a
        # stray key, and enter on the list opens it rather than exporting at once.
        self.query_one("#format", Select).focus()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id != "format" or not isinstance(event.value, str):
            return
        path_input = self.query_one("#path", Field)
        current = Path(path_input.value)
        if current.suffix.lstrip(".") in self.formats:
            # The caret goes to the end of the new name: left where it was, typing
            # would land inside the new extension (story.htmlml).
            path_input.value = str(current.with_suffix(f".{event.value}"))
            path_input.cursor_position = len(path_input.value)
        self.fmt = event.value

    def action_submit(self) -> None:
        if self.working:
            return
        path = self.query_one("#path", Field).value.strip()
        if not path:
            self.show_status("Name a file to export to")
            return
        fmt = self.query_one("#format", Select).value
        branch = self.query_one("#branch", Select).value
        target = str(Path(path).expanduser())
        request = ExportRequest(
            str(fmt),
            target,
            str(branch),
            force=target == self.confirming,
            attribution=self.query_one("#attribution", Checkbox).value,
        )
        self.working = True
        self.show_status("Exporting\u2026", working=True)
        self.post_message(self.Requested(request))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "path" and self.confirming:
            self._confirm("")  # another file: a new confirmation if it exists too

    def finished(self, error: str = "", exists: str = "") -> None:
        """The export is done: close, or show why it failed and keep everything typed.
        ``exists``: the file that was not replaced because it exists; exporting to it
        again replaces it."""
        self.working = False
        if exists:
            self._confirm(exists)
            self.show_status(f"{exists} exists: export again to replace it")
            self.query_one("#export", Button).focus()
        elif error:
            self.show_status(error)
            self.query_one("#path", Field).focus()
        else:
            self.dismiss(None)

    def _confirm(self, path: str) -> None:
        """Ask (``path``) or stop asking (empty) to confirm replacing a file."""
        self.confirming = path
        self.query_one("#export", Button).label = "Replace" if path else "Export"

    def show_status(self, text: str, working: bool = False) -> None:
        """One line under the fields: an error, or that the export is being written."""
        status = self.query_one("#export-status", Label)
        status.update(safe_line(text))  # a path or an OS error: outside text
        status.set_class(working, "-working")
        status.display = bool(text)
