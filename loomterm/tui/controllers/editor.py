"""What a controller may use of the editor app (:class:`Editor`), written as a
protocol so that the controllers never import the app that makes them.

:class:`~loomterm.tui.app.LoomApp` is the one implementation. Controllers hold it as
``self.app`` and reach one another through it (``app.jobs``, ``app.navigation``), so
each one reads the loom and the document open *now* (a session switch replaces both).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.geometry import Size
    from textual.message import Message
    from textual.screen import Screen
    from textual.signal import Signal
    from textual.theme import Theme
    from textual.widget import Widget

    from loomterm.engine import Loom
    from loomterm.tree import Node
    from loomterm.tui.controllers.bookmarks import Bookmarks
    from loomterm.tui.controllers.jobs import Jobs
    from loomterm.tui.controllers.looks import Looks
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.presets import Presets
    from loomterm.tui.controllers.weave import Weave
    from loomterm.tui.document import DocumentModel
    from loomterm.tui.history import History
    from loomterm.tui.prefs import Prefs
    from loomterm.tui.widgets.branch_tree import BranchTree
    from loomterm.tui.widgets.document_view import DocumentView
    from loomterm.tui.widgets.export_dialog import ExportRequest


class Editor(Protocol):
    """The app as its controllers see it: the open session, the widgets, the other
    controllers and the few things of Textual's ``App`` they call."""

    # -- the open session and its document ----------------------------------------------
    loom: Loom
    doc: DocumentModel
    history: History
    prefs: Prefs
    session_name: str
    export_dir: Path | None
    last_export: ExportRequest | None
    """The last export of this editor run: the export dialog opens on its choices."""
    generating: bool
    """True from the moment a generation (or weave) is asked for until it has ended."""

    # -- widgets ---------------------------------------------------------------------------
    view: DocumentView
    branches: BranchTree

    # -- controllers -----------------------------------------------------------------------
    jobs: Jobs
    navigation: Navigation
    looks: Looks
    weave: Weave
    presets: Presets
    bookmarks: Bookmarks

    # -- the app's own plumbing ------------------------------------------------------------
    def node_text(self, node: Node) -> str: ...
    def note_change(self) -> None: ...
    def rebuild_tree(self) -> None: ...
    def rebuild_tree_soon(self) -> None: ...
    def refresh_status(self) -> None: ...
    def refresh_status_soon(self) -> None: ...
    def text_waiting(self) -> bool: ...
    def sync_due(self) -> bool: ...
    def start_sync(self) -> None: ...
    def attached_models(self) -> list[str]: ...
    def use_model(self, key: str) -> None: ...
    def set_theme(self, name: str) -> None: ...

    # -- Textual's App ---------------------------------------------------------------------
    theme: str
    size: Size
    screen: Screen
    available_themes: dict[str, Theme]
    theme_changed_signal: Signal[Theme]

    @property
    def focused(self) -> Widget | None: ...
    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: str = "information",
        timeout: float | None = None,
    ) -> None: ...
    def bell(self) -> None: ...
    def push_screen(self, screen: Screen, callback: Callable[[Any], None] | None = None) -> Any: ...
    def post_message(self, message: Message) -> bool: ...
    def run_worker(self, work: Callable[[], None], **options: Any) -> Any: ...
    async def run_action(self, action: str) -> bool: ...
    def register_theme(self, theme: Theme) -> None: ...
    def unregister_theme(self, theme_name: str) -> None: ...
    def set_keymap(self, keymap: dict[str, str]) -> None: ...
    def get_key_display(self, binding: Any) -> str: ...
