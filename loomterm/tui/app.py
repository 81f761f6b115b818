"""The loomterm editor: a Textual app over one Loom.

:class:`LoomApp` composes the widgets, makes the controllers (``loomterm.tui.controllers``:
one object per area, holding its state) and holds the key bindings. An action of the key
table (``loomterm.tui.keymap``) runs the controller method marked as that action
(``@key_action``; :meth:`LoomApp.run_action` finds it); a message is handed to the controller that
asked for the work by the app's handlers (``loomterm.tui.message_routes``, mixed in).

How work flows:

- Keys edit the :class:`~loomterm.tui.document.DocumentModel` at once; the screen never
  waits on the model. When typing pauses, or before anything that needs the engine, the
  text goes to the engine as one ``Loom.edit`` (``controllers.typing``).
- All model work runs, one job at a time, in a single thread worker (``Jobs``). Jobs
  report back only by posting messages, declared beside the controller that posts them;
  the worker never touches a widget.
- Navigation (siblings, branch points, undo, the branch pane) only reads the tree, so it
  runs on the UI thread, once no job is in flight and the text is synced
  (:meth:`~loomterm.tui.controllers.jobs.Jobs.when_idle`).
- The Loom's own events (from whichever thread changed it) arrive as
  :class:`~loomterm.tui.controllers.swap.Swap.LoomChanged` and refresh the branch pane
  and status.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events
from textual.actions import parse
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.reactive import var
from textual.screen import Screen

from loomterm.tui.commands import LoomCommands
from loomterm.tui.controllers.actions import key_actions
from loomterm.tui.controllers.alternatives import Alternatives
from loomterm.tui.controllers.bookmarks import Bookmarks
from loomterm.tui.controllers.caret import Caret
from loomterm.tui.controllers.chat import Chat
from loomterm.tui.controllers.context import Context
from loomterm.tui.controllers.dialogs import Dialogs
from loomterm.tui.controllers.failures import Failures
from loomterm.tui.controllers.generation import Generation
from loomterm.tui.controllers.hoist import Hoist
from loomterm.tui.controllers.jobs import Jobs
from loomterm.tui.controllers.keeping import Keeping
from loomterm.tui.controllers.lifecycle import Lifecycle
from loomterm.tui.controllers.looks import Looks
from loomterm.tui.controllers.models import Models
from loomterm.tui.controllers.navigation import Navigation
from loomterm.tui.controllers.panes import Panes
from loomterm.tui.controllers.presets import Presets
from loomterm.tui.controllers.progress import Progress
from loomterm.tui.controllers.ratings import Ratings
from loomterm.tui.controllers.search import Search
from loomterm.tui.controllers.sessions import Sessions
from loomterm.tui.controllers.status import TITLE_POP, StatusLine
from loomterm.tui.controllers.swap import Swap, new_document
from loomterm.tui.controllers.think_ahead import ThinkAhead
from loomterm.tui.controllers.tidy import Tidy
from loomterm.tui.controllers.tree_map import TreeMapper
from loomterm.tui.controllers.typing import Typing
from loomterm.tui.controllers.unread import Unread
from loomterm.tui.controllers.weave import Weave
from loomterm.tui.history import History
from loomterm.tui.key_order import FOCUS_BINDINGS
from loomterm.tui.keymap import app_bindings
from loomterm.tui.message_routes import MessageRoutes
from loomterm.tui.model_loading import StartupLoader
from loomterm.tui.prefs import Prefs, load_prefs
from loomterm.tui.sanitize import safe_line
from loomterm.tui.themes import LOOM_DEFAULTS, resolve_references, solidify
from loomterm.tui.widgets.branch_tree import BranchTree
from loomterm.tui.widgets.context import ContextView
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.footer import KeyFooter
from loomterm.tui.widgets.shade_legend import ShadeLegend

if TYPE_CHECKING:
    from textual.driver import Driver
    from textual.notifications import SeverityLevel

    from loomterm.sessions.opening import SessionOpening
    from loomterm.tui.editor_loom import EditorLoom

SYNC_DELAY = 0.4  # seconds of no typing before the text goes to the engine


class EditorScreen(Screen):
    """The editor's main screen. The document takes the keyboard from the first frame:
    keys typed while the editor starts (the terminal hands them over at once, before
    ``on_mount`` could move the focus) are text, not branch-pane keys."""

    AUTO_FOCUS = "#document"
    BINDINGS: ClassVar[list[BindingType]] = list(FOCUS_BINDINGS)


class LoomApp(MessageRoutes, App[None]):
    """A terminal loom over ``loom``. ``session_name`` names the session in titles and
    exports; ``show_speed`` False keeps tok/s out of the status bar (for snapshots).
    With ``opening``, ``loom`` is its preview and the model loads in the background."""

    TITLE = "loomterm"
    generating: var[bool] = var(False)
    """True from the moment a generation is asked for until it has ended."""
    COMMANDS = App.COMMANDS | {LoomCommands}
    BINDINGS: ClassVar[list[BindingType]] = app_bindings()
    CSS = """
    #main { height: 1fr; }
    #tree {
        width: 34%;  /* until the first layout: then fit_tree() sets it in cells */
        border-right: vkey $loom-guide;
    }
    #tree.-hidden { display: none; }
    #document { width: 1fr; }
    /* At the right edge: with the compact footer's margin after it, a cell of the keys
       scrolled under it showed through (a stray "S" after "^p palette"). */
    Footer FooterKey.-command-palette { border-left: vkey $loom-guide; margin-right: 0; }
    /* Notifications stand above the status bar and the footer, never over them. */
    ToastRack { margin-bottom: 2; }
    """

    def __init__(
        self,
        loom: EditorLoom,
        *,
        session_name: str = "",
        show_speed: bool = True,
        sync_delay: float = SYNC_DELAY,
        export_dir: Path | None = None,
        opening: SessionOpening | None = None,
    ) -> None:
        super().__init__()
        self.loom = loom
        self.load_error: BaseException | None = None
        self.session_name = session_name
        self.show_speed = show_speed
        self.prefs: Prefs = load_prefs()
        self.doc = new_document(loom)
        self.history = History()
        self._make_controllers(sync_delay, export_dir)
        # Opening with the model still to load: ``loom`` is the session file's preview
        # until the loader's job brings the real Loom (``tui.model_loading``).
        self.loader = StartupLoader(self, self.jobs, opening) if opening is not None else None
        if opening is not None and opening.read_only:
            self.lifecycle.read_only = True  # the preview knows no session yet
        self._make_widgets()

    def _make_controllers(self, sync_delay: float, export_dir: Path | None) -> None:
        """One controller per area; each is handed the ones it uses. Their methods
        marked ``@key_action`` are the key table's actions (:meth:`run_action`)."""
        self.jobs = jobs = Jobs(self)
        self.progress = progress = Progress(self, jobs)
        self.looks = looks = Looks(self)
        self.lifecycle = lifecycle = Lifecycle(self, jobs, looks)
        self.keeping = keeping = Keeping(self, jobs, lifecycle)
        self.typing = Typing(self, jobs, lifecycle, keeping, sync_delay)
        self.presets = presets = Presets(self)
        self.panes = panes = Panes(self)
        self.navigation = navigation = Navigation(self, jobs)
        self.unread = Unread(jobs)
        self.hoist = hoist = Hoist(self)
        self.tree_map = TreeMapper(self, navigation, hoist)
        self.caret = caret = Caret(self, jobs)
        self.context = context = Context(self, jobs)
        self.generation = generation = Generation(self, jobs, navigation, context)
        self.tidy = Tidy(self, jobs, navigation, looks)
        self.bookmarks = Bookmarks(self, jobs, navigation)
        self.weave = weave = Weave(self, jobs, navigation)
        self.ratings = Ratings(self, jobs, navigation, weave)
        self.search = Search(self, jobs, navigation)
        self.dialogs = Dialogs(self, jobs, looks, export_dir)
        self.models = models = Models(self, jobs, navigation, generation)
        self.ahead = ThinkAhead(self, jobs, generation, models)
        self.alternatives = Alternatives(self, jobs)
        self.chat = Chat(self, jobs, looks)
        self.sessions = Sessions(self, jobs, navigation, caret, generation, progress)
        self.failures = Failures(self, self.sessions, self.typing, lifecycle)
        self.swap = Swap(self, jobs, progress, caret, navigation, generation, models, panes)
        self.status_line = StatusLine(
            self, jobs, progress, generation, weave, presets, navigation, keeping, caret
        )
        controllers = [
            controller
            for name, controller in vars(self).items()
            if name != "loom"
            and type(controller).__module__.startswith("loomterm.tui.controllers.")
        ]
        self.actions: dict[str, Callable[..., Any]] = key_actions(controllers, jobs)

    def get_default_screen(self) -> Screen:
        """The main screen, whose first focus is the document (see :class:`EditorScreen`)."""
        return EditorScreen(id="_default")

    def get_driver_class(self) -> type[Driver]:
        """Textual's choice of driver; where that is the Linux driver, loomterm's
        (:class:`loomterm.tui.terminal.driver.LoomDriver`), which reads bracketed pastes
        whole and in order. Windows, the web and inline mode keep Textual's driver and
        its parser (and its reading of pastes that hold an ESC)."""
        chosen = super().get_driver_class()
        if chosen.__module__ != "textual.drivers.linux_driver":
            return chosen
        # Imported here: the Linux driver's module needs termios, which Windows lacks.
        from textual.drivers.linux_driver import LinuxDriver

        from loomterm.tui.terminal.driver import LoomDriver

        return LoomDriver if chosen is LinuxDriver else chosen

    # -- composition -----------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield self.branches
            yield self.view
            yield self.context_view
        yield self.models.legend
        yield self.shade_legend
        yield self.status
        yield KeyFooter(compact=True)

    def _make_widgets(self) -> None:
        """The main screen's widgets, made once and kept: the app's ``query_one`` looks
        at the active screen, which is a dialog while one is open."""
        self.branches = BranchTree(self.panes.node_text, id="tree")
        self.view = DocumentView(self.doc, id="document")
        self.status = self.status_line.bar
        self.shade_legend = ShadeLegend(id="shade-legend")
        self.context_view = ContextView(id="context-view", classes="-hidden")
        self.panes.show_prefs()

    def on_mount(self) -> None:
        self.looks.load_themes()
        self.looks.load_keymap()
        self.swap.hear(self.loom)
        self.jobs.start()
        if self.loader is not None:
            self.loader.start()  # the engine's first job: what waits for it waits in order
        cursor = self.loom.cursor
        self.doc.show(cursor)
        self.caret.place_saved(cursor)  # where the user left it (else the end)
        self.keeping.restore()  # text typed before the model read it, kept in the file
        self.swap.started(cursor)
        self.view.focus()
        self.view.placeholder = self.looks.start_hint()
        self.panes.fit_tree()
        self.status_line.show_title()
        self.call_after_refresh(self._after_first_layout)
        self.models.mounted()

    def on_resize(self, event: events.Resize) -> None:
        self.panes.fit_tree(event.size.width)

    def _after_first_layout(self) -> None:
        self.view.document_changed()
        self.panes.rebuild_tree()
        self.status_line.refresh()

    def on_unmount(self) -> None:
        self.caret.report()  # quitting: the caret as it is now, not as it last settled
        self.swap.let_go(self.loom)
        self.jobs.stop()
        self.write_terminal(TITLE_POP)

    def write_terminal(self, text: str) -> None:
        """Write ``text`` (an escape sequence: the window title) to the terminal, when
        there is one."""
        if self._driver is not None and not self.is_headless:
            self._driver.write(text)

    # -- actions -----------------------------------------------------------------------
    @property
    def model_ready(self) -> bool:
        """False while the model loads in the background (``loomterm.tui.model_loading``)."""
        return self.loader is None

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """The app's own actions run their controller's marked method; those that
        need the model wait for it, in order, while it loads."""
        if isinstance(action, str) and default_namespace in (None, self):
            namespace, name, params = parse(action)
            if namespace in ("", "app"):  # the app's own: "app.x" as well as "x"
                loader = self.loader
                if loader is not None and loader.needs_model(action):
                    loader.hold(lambda: self.run_action(action), name)
                    self.status_line.soon()
                    return True
                run = self.actions.get(name)
                if run is not None:
                    if not self.check_action(name, params):
                        return False  # off: the key goes on to other bindings (as Textual's)
                    result = run(*params)
                    if inspect.isawaitable(result):
                        await result
                    return True
        return await super().run_action(action, default_namespace, namespaces)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Stop (esc) is offered only while there is something to stop; esc otherwise
        reaches the widgets (and leaves the branch pane)."""
        if action == "stop":
            return self.generation.can_stop()
        return True

    def watch_generating(self) -> None:
        self.refresh_bindings()

    async def action_quit(self) -> None:
        """Textual's own quit (its Quit command calls this): the lifecycle's."""
        self.lifecycle.quit()

    # -- notifications and themes ------------------------------------------------------
    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every notification (widgets' and screens' come here too) as one safe line of
        plain text, never markup: messages carry server errors, names and paths, and
        ``[/x]`` in one would be a markup error. ``markup`` is accepted and ignored."""
        super().notify(
            safe_line(message),
            title=safe_line(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(LOOM_DEFAULTS)

    def get_css_variables(self) -> dict[str, str]:
        variables = solidify(resolve_references(super().get_css_variables()))
        self.theme_variables = variables
        return variables

    def search_themes(self) -> None:
        """Textual's Theme command: loomterm's themes (``Looks.search_themes``)."""
        self.looks.search_themes()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's system commands but its Theme (loomterm's own Theme replaces it)."""
        for command in super().get_system_commands(screen):
            if command.title != "Theme":
                yield command

    def set_theme(self, name: str) -> None:
        self.theme = name

    # -- events: messages go to their controllers (``tui.message_routes``) ------------
    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            self.ahead.key()  # every key stops thinking ahead first, and waits again
        await super().on_event(event)


def run_app(loom: EditorLoom, session_name: str = "") -> None:
    """Run the editor on ``loom`` until the user quits."""
    LoomApp(loom, session_name=session_name).run()


__all__ = ["LoomApp", "run_app"]
