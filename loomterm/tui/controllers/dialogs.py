"""The settings, export and help dialogs, and what their answers do."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm.tui import defaults, ops
from loomterm.tui.keymap import keymap_path
from loomterm.tui.messages import Exported
from loomterm.tui.widgets.export_dialog import ExportRequest, ExportScreen
from loomterm.tui.widgets.help import HelpScreen
from loomterm.tui.widgets.settings import SettingsScreen, unavailable_settings

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor


class Dialogs:
    """Opens the settings, export and help screens and acts on their answers."""

    def __init__(self, app: Editor) -> None:
        self.app = app

    def settings(self) -> None:
        """The settings dialog; saved settings go to the session."""
        app = self.app

        def saved(values: dict[str, Any] | None) -> None:
            if values:
                app.loom.update_settings(**values)
                app.refresh_status()
                app.notify("Settings saved with the session", timeout=2)

        app.push_screen(
            SettingsScreen(
                app.loom.settings.as_dict(),
                defaults.sources(app.loom),
                unavailable_settings(app.loom.capabilities),
            ),
            saved,
        )

    def export(self) -> None:
        """The export dialog; the export runs as a job once the engine is idle."""
        from loomterm.export import FORMATS

        app = self.app
        folder = app.export_dir or Path.cwd()
        stem = app.session_name or "loomterm"

        def chosen(request: ExportRequest | None) -> None:
            if request is None:
                return
            loom = app.loom

            def job() -> None:
                ops.export_session(loom, request.path, request.fmt, request.branch)
                app.post_message(Exported(request.path, request.fmt))

            app.jobs.when_idle(lambda: app.jobs.submit("export", job))

        app.push_screen(ExportScreen(FORMATS, folder, stem), chosen)

    def help(self) -> None:
        """Every key and action, and where the key map lives."""
        where = keymap_path()
        self.app.push_screen(HelpScreen(self.app.looks.help_rows(), str(where) if where else ""))
