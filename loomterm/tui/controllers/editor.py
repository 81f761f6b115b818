"""What a controller may use of the editor app (:class:`Editor`), written as a
protocol so that the controllers never import the app that makes them.

:class:`~loomterm.tui.app.LoomApp` is the one implementation. A controller holds it as
``self.app`` and reads the loom and the document through it, so it always sees the
ones open *now* (a session switch replaces both). The other controllers a controller
uses are handed to its constructor (``Tidy(app, jobs, navigation, looks)``), so who
depends on whom is written down once, in the app's ``__init__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from loomterm.tui.controllers.progress import Progress

if TYPE_CHECKING:
    from textual.geometry import Size
    from textual.message import Message
    from textual.screen import Screen
    from textual.signal import Signal
    from textual.theme import Theme
    from textual.timer import Timer
    from textual.widget import Widget

    from loomterm.tui.controllers.hoist import Hoist
    from loomterm.tui.controllers.lifecycle import Lifecycle
    from loomterm.tui.controllers.panes import Panes
    from loomterm.tui.controllers.progress import Progress
    from loomterm.tui.controllers.status import StatusLine
    from loomterm.tui.controllers.swap import Swap
    from loomterm.tui.controllers.think_ahead import ThinkAhead
    from loomterm.tui.controllers.tree_map import TreeMapper
    from loomterm.tui.controllers.typing import Typing
    from loomterm.tui.controllers.unread import Unread
    from loomterm.tui.document import DocumentModel
    from loomterm.tui.editor_loom import EditorLoom
    from loomterm.tui.history import History
    from loomterm.tui.model_loading import StartupLoader
    from loomterm.tui.prefs import Prefs
    from loomterm.tui.widgets.branch_tree import BranchTree
    from loomterm.tui.widgets.context import ContextView
    from loomterm.tui.widgets.document_view import DocumentView
    from loomterm.tui.widgets.shade_legend import ShadeLegend


class Editor(Protocol):
    """The app as its controllers see it: the open session, the widgets, the app's
    own plumbing (status, branch pane, typed text) and the few things of Textual's
    ``App`` they call."""

    # -- the open session and its document ----------------------------------------------
    loom: EditorLoom
    """The open session's Loom: the real one, or its file's preview while the model
    loads (``loader`` is set then)."""
    doc: DocumentModel
    history: History
    prefs: Prefs
    session_name: str
    show_speed: bool
    load_error: BaseException | None
    """The error the start's model load failed with (the command line says it)."""
    unread: Unread
    """Unread model branches (marked, cleared where the document goes)."""
    hoist: Hoist
    ahead: ThinkAhead
    tree_map: TreeMapper
    generating: bool
    """True from the moment a generation (or weave) is asked for until it has ended."""
    loader: StartupLoader | None
    """While the model loads in the background: what loads it and what waits for it."""

    # -- widgets ---------------------------------------------------------------------------
    view: DocumentView
    branches: BranchTree
    context_view: ContextView
    shade_legend: ShadeLegend

    # -- the controllers others reach through the app ----------------------------------
    typing: Typing
    """Typed text and its sync to the engine."""
    status_line: StatusLine
    """The status bar and the window title."""
    panes: Panes
    """The branch pane (its contents) and the view toggles."""
    lifecycle: Lifecycle
    """Read-only sessions and quitting (``note_change``)."""
    progress: Progress
    """Progress.Prefill and model-loading progress."""
    swap: Swap
    """Which Loom is open, and putting another in its place."""

    # -- the app's own --------------------------------------------------------------------
    def write_terminal(self, text: str) -> None: ...

    # -- Textual's App ---------------------------------------------------------------------
    theme: str
    title: str
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
    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    def call_later(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...
    def call_after_refresh(self, callback: Callable[[], Any]) -> bool: ...
    def set_timer(self, delay: float, callback: Callable[[], Any]) -> Timer: ...
    def get_css_variables(self) -> dict[str, str]: ...
    def refresh_bindings(self) -> None: ...
    def exit(self, result: Any = None, return_code: int = 0) -> None: ...
    @property
    def log(self) -> Any: ...
    def register_theme(self, theme: Theme) -> None: ...
    def unregister_theme(self, theme_name: str) -> None: ...
    def set_keymap(self, keymap: dict[str, str]) -> None: ...
    def get_key_display(self, binding: Any) -> str: ...
