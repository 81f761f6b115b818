"""The settings, export and help dialogs, and what their answers do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from loomterm.config.keymap import keymap_path
from loomterm.errors import LoomError
from loomterm.sessions import defaults
from loomterm.tui import ops
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.widgets.export_dialog import ExportRequest, ExportScreen
from loomterm.tui.widgets.help import HelpScreen
from loomterm.tui.widgets.settings import SettingsScreen, unavailable_settings

if TYPE_CHECKING:
    from loomterm.tui.controllers.looks import Looks


@dataclass(eq=False, repr=False)
class Dialogs(Controller):
    """Opens the settings, export and help screens and acts on their answers."""

    @dataclass
    class Exported(Message):
        """An export finished: written, or ``error`` says in one line why not (``exists``:
        the file that exists, to be replaced only once the user confirms)."""

        request: ExportRequest
        error: str = ""
        exists: str = ""

    looks: Looks
    export_dir: Path | None  # exports go here first (else the documents folder)
    # The last export of this editor run: the export dialog opens on its choices.
    last_export: ExportRequest | None = field(default=None, init=False)

    @key_action()
    def settings(self) -> None:
        """The settings dialog; saved settings go to the session."""
        app = self.app

        def saved(values: dict[str, Any] | None) -> None:
            if values is None:
                return  # cancelled
            if not values:
                app.notify("No setting changed", timeout=2)
                return
            app.loom.update_settings(**values)
            app.status_line.refresh()
            app.notify("Settings saved with the session", timeout=2)

        app.push_screen(
            SettingsScreen(
                app.loom.settings.as_dict(),
                defaults.sources(app.loom),
                unavailable_settings(app.loom.capabilities),
            ),
            saved,
        )

    @key_action()
    def export(self) -> None:
        """The export dialog, opening on the folder this session last exported to (kept
        in its file), else this editor run's last, else the documents folder; and on
        the format and branches of this run's last export (the first time: Markdown,
        the current path)."""
        from loomterm.config.locations import documents_dir
        from loomterm.export import FORMATS
        from loomterm.sessions.session import saved_export_folder

        app = self.app
        last = self.last_export
        saved = saved_export_folder(app.loom)
        if saved:
            folder = Path(saved)
        elif last:
            folder = Path(last.path).parent
        else:
            folder = self.export_dir or documents_dir()
        stem = app.session_name or "loomterm"
        fmt, branch = (last.fmt, last.branch) if last else ("md", "current")
        attribution = last.attribution if last else False
        app.push_screen(ExportScreen(FORMATS, folder, stem, fmt, branch, attribution))

    def export_requested(self, request: ExportRequest) -> None:
        """The dialog asked for an export: a job, once the engine is idle."""
        app = self.app
        loom = app.loom

        def job() -> None:
            from loomterm.export import TargetExists

            try:
                ops.export_session(
                    loom,
                    request.path,
                    request.fmt,
                    request.branch,
                    force=request.force,
                    attribution=request.attribution,
                )
            except TargetExists as exc:  # asked in the dialog before it is replaced
                app.post_message(Dialogs.Exported(request, str(exc), exists=exc.path))
            except LoomError as exc:  # a missing folder, say: said in the dialog
                app.post_message(Dialogs.Exported(request, str(exc)))
            else:
                app.post_message(Dialogs.Exported(request))

        self.jobs.when_idle(lambda: self.jobs.submit("export", job))

    def exported(self, message: Dialogs.Exported) -> None:
        """The export ended: the dialog (if still open) closes or shows why not."""
        app = self.app
        request = message.request
        dialog = app.screen if isinstance(app.screen, ExportScreen) else None
        if message.error:
            if dialog is not None:
                dialog.finished(message.error, exists=message.exists)
            else:
                app.notify(message.error, severity="error", timeout=6)
            return
        self.last_export = request
        from loomterm.sessions.session import record_export_folder

        record_export_folder(app.loom, str(Path(request.path).absolute().parent))
        if dialog is not None:
            dialog.finished()
        app.notify(f"Exported {request.fmt} to {request.path}", timeout=4)

    @key_action()
    def help(self) -> None:
        """Every key and action, and where the key map lives."""
        where = keymap_path()
        self.app.push_screen(HelpScreen(self.looks.help_rows(), str(where) if where else ""))
