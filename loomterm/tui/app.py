"""The loomterm editor: a Textual app over one Loom.

:class:`LoomApp` owns composition (the widgets), the bindings and their actions,
syncing typed text, and routing messages. What each action does lives in a controller
(``loomterm.tui.controllers``): one object per area, made in ``__init__`` and holding
that area's state (``jobs``, the engine worker; ``navigation``, ``generation``,
``tidy``, ``models``, ``sessions`` and the rest). An action here is one line that asks
its controller; a job's message is handed to the controller that asked for it.

How work flows:

- Keys edit the :class:`~loomterm.tui.document.DocumentModel` at once; the screen never
  waits on the model. When typing pauses (``sync_delay``), or before anything that needs
  the engine, the text goes to the engine as one ``Loom.edit``.
- All model work runs, one job at a time, in a single thread worker (``Jobs``).
  Jobs report back only by posting messages (``loomterm.tui.messages``); the worker
  never touches a widget.
- Navigation (siblings, branch points, undo, the branch pane) only reads the tree, so it
  runs on the UI thread, once no job is in flight and the text is synced
  (:meth:`~loomterm.tui.controllers.jobs.Jobs.when_idle`).
- The Loom's own events (from whichever thread changed it) arrive as
  :class:`~loomterm.tui.messages.LoomChanged` and refresh the branch pane and status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import events, on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.reactive import var
from textual.screen import Screen
from textual.timer import Timer

from loomterm.errors import LoomError, PrefillCancelled
from loomterm.sessions.opening import LoadAbandoned
from loomterm.tree import Node
from loomterm.tui import ops, paste, sessions
from loomterm.tui.commands import LoomCommands
from loomterm.tui.controllers.alternatives import Alternatives
from loomterm.tui.controllers.bookmarks import Bookmarks
from loomterm.tui.controllers.caret import Caret
from loomterm.tui.controllers.chat import Chat
from loomterm.tui.controllers.context import Context, ContextAssembled
from loomterm.tui.controllers.dialogs import Dialogs
from loomterm.tui.controllers.generation import Generation
from loomterm.tui.controllers.hoist import Hoist
from loomterm.tui.controllers.jobs import Jobs
from loomterm.tui.controllers.keeping import Keeping, SavedElsewhere, SaveStateChanged
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
from loomterm.tui.controllers.think_ahead import ThinkAhead
from loomterm.tui.controllers.tidy import Tidied, Tidy
from loomterm.tui.controllers.tree_map import TreeMapper
from loomterm.tui.controllers.unread import Unread
from loomterm.tui.controllers.weave import Weave, WeaveDone, WeaveProgress
from loomterm.tui.document import DocumentModel
from loomterm.tui.history import History, Place
from loomterm.tui.key_order import FOCUS_BINDINGS
from loomterm.tui.keymap import app_bindings
from loomterm.tui.messages import (
    Exported,
    GenerationDone,
    GenerationStarted,
    JobFailed,
    JobFinished,
    Loading,
    LoomChanged,
    ModelReady,
    Moved,
    Prefill,
    SavedAs,
    SessionPreviewed,
    SessionSwitched,
    Synced,
    TokensStreamed,
    TokensTakenBack,
)
from loomterm.tui.model_loading import LOAD_JOB, StartupLoader
from loomterm.tui.prefs import Prefs, load_prefs
from loomterm.tui.sanitize import safe_line
from loomterm.tui.themes import LOOM_DEFAULTS, resolve_references, solidify
from loomterm.tui.widgets.branch_tree import BranchTree
from loomterm.tui.widgets.context import ContextView
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.export_dialog import ExportScreen
from loomterm.tui.widgets.footer import KeyFooter
from loomterm.tui.widgets.shade_legend import ShadeLegend
from loomterm.tui.widgets.status_bar import StatusBar, StatusInfo, backend_name

if TYPE_CHECKING:
    from textual.driver import Driver
    from textual.notifications import SeverityLevel

    from loomterm.engine import Loom
    from loomterm.sessions.opening import SessionOpening
    from loomterm.tui.widgets.export_dialog import ExportRequest

TITLE_PUSH = "\x1b[22;2t"  # xterm: save the window title (terminals without it ignore it)
TITLE_POP = "\x1b[23;2t"  # and give it back
CHANGES = frozenset(
    {"add", "split", "update", "rewrite", "settings"}
)  # events that change the session
SYNC_DELAY = 0.4  # seconds of no typing before the text goes to the engine
TREE_DELAY = 0.15  # structural changes are batched this long before the pane rebuilds


class EditorScreen(Screen):
    """The editor's main screen. The document takes the keyboard from the first frame:
    keys typed while the editor starts (the terminal hands them over at once, before
    ``on_mount`` could move the focus) are text, not branch-pane keys."""

    AUTO_FOCUS = "#document"
    BINDINGS: ClassVar[list[BindingType]] = list(FOCUS_BINDINGS)


class LoomApp(App[None]):
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
        loom: Loom,
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
        self.sync_delay = sync_delay
        self.export_dir = export_dir
        self.last_export: ExportRequest | None = None  # the dialog opens on its choices
        self.prefs: Prefs = load_prefs()
        self.doc = self._new_document(loom)
        self.history = History()
        self._make_controllers()
        # Opening with the model still to load: ``loom`` is the session file's preview
        # until the loader's job brings the real Loom (``tui.model_loading``).
        self.loader = StartupLoader(self, self.jobs, opening) if opening is not None else None
        self._sync_due = False
        self._sync_timer: Timer | None = None
        # The nodes this run of typing writes into (``ops.TypingRun``): a new run
        # begins when the caret leaves them, a generation starts or on "branch here".
        self.typing_run = ops.TypingRun()
        self._failed_sync: str | None = None
        self._tree_timer: Timer | None = None
        self._status_timer: Timer | None = None
        self._text_cache: dict[tuple[int, int, int], str] = {}
        self.read_only = sessions.is_read_only(loom)
        self.unsaved = False  # a read-only session was changed (in memory only)
        self._make_widgets()

    def _make_controllers(self) -> None:
        """One controller per area; each is handed the ones it uses."""
        self.jobs = jobs = Jobs(self)
        self.progress = progress = Progress(self, jobs)
        self.lifecycle = lifecycle = Lifecycle(self, jobs)
        self.keeping = Keeping(self, jobs, lifecycle)
        self.looks = looks = Looks(self)
        self.presets = Presets(self)
        self.panes = Panes(self)
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
        self.dialogs = Dialogs(self, jobs, looks)
        self.models = models = Models(self, jobs, navigation, generation)
        self.ahead = ThinkAhead(self, jobs, generation, models)
        self.alternatives = Alternatives(self, jobs)
        self.chat = Chat(self, jobs, looks)
        self.sessions = Sessions(self, jobs, navigation, caret, generation, progress)

    def get_default_screen(self) -> Screen:
        """The main screen, whose first focus is the document (see :class:`EditorScreen`)."""
        return EditorScreen(id="_default")

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, reading bracketed pastes whole (``loomterm.tui.paste``)."""
        return paste.install(super().get_driver_class())

    def _new_document(self, loom: Loom) -> DocumentModel:
        codec = loom.codec
        special = set(codec.special_ids) | set(codec.added_ids)
        return DocumentModel(codec.token_bytes, special)

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
        self.branches = BranchTree(self.node_text, id="tree")
        self.branches.show_hidden = self.prefs.show_hidden
        if not self.prefs.tree:
            self.branches.add_class("-hidden")
        self.view = DocumentView(self.doc, id="document")
        self.view.boundaries = self.prefs.boundaries
        self.view.probabilities = self.prefs.probabilities
        self.view.surprisal = self.prefs.surprisal
        self.view.approx_marks = self.prefs.approx
        self.status = StatusBar(id="status")
        self.shade_legend = ShadeLegend(id="shade-legend")
        self.shade_legend.show_view(self.view.surprisal, self.view.probabilities)
        self.context_view = ContextView(id="context-view", classes="-hidden")

    def on_mount(self) -> None:
        self.looks.load_themes()
        self.looks.load_keymap()
        self.loom.subscribe(self._on_loom_event)
        self._attach_engine(self.loom)
        self.jobs.start()
        if self.loader is not None:
            self.loader.start()  # the engine's first job: what waits for it waits in order
        cursor = self.loom.cursor
        self.doc.show(cursor)
        self.caret.place_saved(cursor)  # where the user left it (else the end)
        self.keeping.restore()  # text typed before the model read it, kept in the file
        if self.loader is not None:
            self.loader.caret_at_start = self.doc.caret
        self.history.push(Place(cursor, self.doc.caret))
        self.navigation.remember(cursor)
        self.view.focus()
        self.view.placeholder = self.looks.start_hint()
        self.panes.fit_tree()
        self.show_title()
        self.call_after_refresh(self._after_first_layout)
        self.models.mounted()

    def on_resize(self, event: events.Resize) -> None:
        self.panes.fit_tree(event.size.width)

    def _after_first_layout(self) -> None:
        self.view.document_changed()
        self.rebuild_tree()
        self.refresh_status()

    def _attach_engine(self, loom: Loom) -> None:
        """Hear ``loom``'s prefill progress (the status bar), and let escape stop it."""
        loom.progress = self.progress.report
        loom.interrupt = self.jobs.interrupt

    def note_change(self) -> None:
        """The session changed (typing, a new node, a setting): a read-only one says
        so once."""
        self.lifecycle.note_change()

    def let_go(self, loom: Loom) -> None:
        """Stop hearing ``loom`` (another session replaces it)."""
        loom.unsubscribe(self._on_loom_event)
        loom.progress = loom.interrupt = None

    def open_loom(self, loom: Loom, name: str) -> None:
        """Put ``loom`` (another session) in place of the open one, named ``name`` (or
        as before): a new document and history, the caches cleared. A session whose
        model was still loading is given up (its file given back, the work held for it
        dropped)."""
        if self.loader is not None:
            self.loader.opening.close()
            self.loader = None
        self.loom = loom
        self.session_name = name or self.session_name
        self.generation.tokens_per_second = None  # the last session's speed is not this one's
        self.read_only = sessions.is_read_only(loom)
        self.unsaved = False
        loom.subscribe(self._on_loom_event)
        self._attach_engine(loom)
        self.doc = self._new_document(loom)
        self.view.doc = self.doc
        self.history = History()
        self.navigation.last_seen.clear()
        self._text_cache.clear()
        self.rebuild_tree()
        self.show_title()

    def open_preview(self, opening: SessionOpening, name: str) -> None:
        """Put ``opening``'s session (another one) in place of the open one at once, from
        its file, and load its model in the background as at start (the status bar
        shows it; what needs the model waits for it, in order)."""
        preview = opening.preview()
        self.open_loom(preview, name)  # type: ignore[arg-type]
        self.loader = loader = StartupLoader(self, self.jobs, opening)
        loader.start()
        cursor = preview.cursor
        self.doc.show(cursor)
        self.caret.place_saved(cursor)
        loader.caret_at_start = self.doc.caret
        self.history.push(Place(cursor, self.doc.caret))
        self.navigation.remember(cursor)
        self.view.document_changed()
        self.refresh_bindings()
        self.refresh_status_soon()

    def on_unmount(self) -> None:
        self.caret.report()  # quitting: the caret as it is now, not as it last settled
        self.loom.unsubscribe(self._on_loom_event)
        self.loom.progress = None
        self.loom.interrupt = None
        self.jobs.stop()
        if self._driver is not None and not self.is_headless:
            self._driver.write(TITLE_POP)

    # -- the model, loading in the background -----------------------------------------
    @property
    def model_ready(self) -> bool:
        """False while the model loads in the background (``loomterm.tui.model_loading``)."""
        return self.loader is None

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """Actions of the app's own that need the model wait for it, in order."""
        loader = self.loader
        if (
            loader is not None
            and isinstance(action, str)
            and default_namespace in (None, self)
            and "." not in action.partition("(")[0]
            and loader.needs_model(action)
        ):
            loader.hold(lambda: self.run_action(action), action.partition("(")[0])
            self.refresh_status_soon()
            return True
        return await super().run_action(action, default_namespace, namespaces)

    def when_model_ready(self, run: Callable[[], object], what: str) -> None:
        """Run ``run`` now, or (the model still loading) once it is ready."""
        if self.loader is None:
            run()
        else:
            self.loader.hold(run, what)

    def loading_progress(self, stage: str, done: int, total: int | None) -> None:
        """Model-loading progress, from the worker: to the status bar."""
        self.post_message(Loading(stage, done, total))

    def on_model_ready(self, message: ModelReady) -> None:
        """The real Loom takes the preview's place; held work runs, in order."""
        loader, preview, loom = self.loader, self.loom, message.loom
        if loader is None:
            return
        self.loader = None
        self.loom = loom  # type: ignore[assignment]
        self.read_only = sessions.is_read_only(loom)  # type: ignore[arg-type]
        loom.subscribe(self._on_loom_event)  # type: ignore[attr-defined]
        self._attach_engine(loom)  # type: ignore[arg-type]
        doc = self.doc
        if doc.dirty or doc.node is None or loom.tree is not preview.tree:  # type: ignore[attr-defined]
            # Typing is under way: it stays; the real tokenizer decodes from now on.
            codec = loom.codec  # type: ignore[attr-defined]
            doc.token_bytes = codec.token_bytes
            doc.special_ids = set(codec.special_ids) | set(codec.added_ids)
        else:
            node, caret = doc.node, doc.caret
            self.doc = self._new_document(loom)  # type: ignore[arg-type]
            self.view.doc = self.doc
            self.doc.show(node)
            if caret == loader.caret_at_start:
                self.caret.place_saved(node)  # the session records where it was left
            else:
                self.doc.move_to(min(caret, self.doc.length))
            self.view.document_changed(scroll=False)
        self._text_cache.clear()
        self.models.changed()
        self.models.show_notes()
        self.rebuild_tree_soon()
        self.refresh_bindings()
        for run in loader.take_waiting():
            self.call_later(run)
        self.refresh_status_soon()

    # -- notifications -----------------------------------------------------------------
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

    # -- the title -------------------------------------------------------------------
    def show_title(self) -> None:
        """The window title: the session's name, and whether it is read-only (the
        terminal's title is saved first and given back on quit)."""
        title = "loomterm"
        if self.session_name:
            title += f" \u2014 {self.session_name}"
        if self.read_only:
            title += " (read-only)"
        first = self.title == self.TITLE
        self.title = title
        if self._driver is not None and not self.is_headless:
            if first:
                self._driver.write(TITLE_PUSH)
            self._driver.write(f"\x1b]2;{safe_line(title)}\x07")

    # -- bindings ----------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Stop (esc) is offered only while generating; esc otherwise reaches the
        widgets (and leaves the branch pane)."""
        if action == "stop":
            return self.generating or self.progress.prefill is not None
        return True

    def watch_generating(self) -> None:
        self.refresh_bindings()

    # -- actions: each asks its controller ----------------------------------------------
    async def action_quit(self) -> None:
        self.lifecycle.quit()

    def action_generate(self) -> None:
        self.jobs.when_idle(lambda: self.generation.generate(1), sync=False)

    def action_generate_n(self) -> None:
        self.generation.generate_n()

    def action_regenerate(self) -> None:
        self.jobs.when_idle(self.generation.regenerate)

    def action_regenerate_own_context(self) -> None:
        """Regenerate the generated node at the caret with the context it was made
        with (memory, author's note, world info of that time), not the current one."""
        self.jobs.when_idle(lambda: self.generation.regenerate(own_context=True))

    def action_refresh_exact(self) -> None:
        self.generation.refresh_exact()

    def action_stop(self) -> None:
        """Esc: stop reading a long text (keeping the edit) or generating (keeping what
        came); else leave the branch pane."""
        if self.progress.prefill is not None:
            self.jobs.interrupt.set()
        if self.generating:
            self.jobs.cancel.set()
        elif self.progress.prefill is None and self.focused is self.branches:
            self.view.focus()
        self.refresh_status()  # "stopping…" at once; the engine ends its step first

    def action_alternatives(self) -> None:
        self.jobs.when_idle(lambda: self.alternatives.show(None))

    def action_siblings(self) -> None:
        self.models.siblings()

    def action_next_model(self) -> None:
        self.models.next()

    def action_attach_model(self) -> None:
        self.models.ask_attach()

    def action_toggle_blind(self) -> None:
        self.models.toggle_blind()

    def action_pick_branch(self) -> None:
        self.models.pick_branch()

    def action_new_chat(self) -> None:
        self.chat.new()

    def action_add_turn(self) -> None:
        self.chat.ask_turn()

    def action_sessions(self) -> None:
        self.sessions.pick()

    def action_save_elsewhere(self) -> None:
        self.keeping.save_elsewhere()

    def action_previous_session(self) -> None:
        self.sessions.back()

    def action_context_dialog(self) -> None:
        self.context.ask()

    def action_toggle_context_view(self) -> None:
        self.context.toggle()

    def action_sibling(self, step: int) -> None:
        self.jobs.when_idle(lambda: self.navigation.sibling(step), stop=True)

    def action_branch_point(self, step: int) -> None:
        self.jobs.when_idle(lambda: self.navigation.branch_point(step), stop=True)

    def action_branch_here(self) -> None:
        """The next keystroke makes a new branch, even in text of the writer's own that
        would be retyped in place; the old text stays as it is."""
        self.typing_run = ops.TypingRun(branch=True)
        self.notify("The next edit starts a new branch here", timeout=2)

    def action_undo(self) -> None:
        self.jobs.when_idle(self.tidy.undo, stop=True)

    def action_redo(self) -> None:
        self.jobs.when_idle(self.tidy.redo, stop=True)

    def action_split_node(self) -> None:
        self.jobs.when_idle(self.tidy.split, stop=True)

    def action_merge_node(self) -> None:
        self.jobs.when_idle(self.tidy.merge, stop=True)

    def action_pick_up_branch(self) -> None:
        self.tidy.pick_up()

    def action_move_branch_here(self) -> None:
        self.jobs.when_idle(self.tidy.move_here, stop=True)

    def action_bookmark(self) -> None:
        self.bookmarks.toggle()

    def action_next_bookmark(self) -> None:
        self.bookmarks.next()

    def action_tree_map(self) -> None:
        self.tree_map.open()

    def action_hoist(self) -> None:
        self.hoist.hoist()

    def action_unhoist(self) -> None:
        self.hoist.unhoist()

    def action_hide_branch(self) -> None:
        self.bookmarks.hide_branch()

    def action_unhide_branch(self) -> None:
        self.bookmarks.unhide_branch()

    def action_rate(self, value: int) -> None:
        self.ratings.rate(value)

    def action_rating_filter(self) -> None:
        self.ratings.next_filter()

    def action_search(self) -> None:
        self.search.ask()

    def action_search_step(self, step: int) -> None:
        self.search.step(step)

    def action_weave(self) -> None:
        self.weave.ask()

    def action_tree_width(self, step: int) -> None:
        self.panes.tree_width(step)

    def action_toggle_tree(self) -> None:
        self.panes.toggle_tree()

    def action_focus_tree(self) -> None:
        self.panes.focus_tree()

    def action_focus_document(self) -> None:
        self.view.focus()

    def action_toggle_view(self, what: str) -> None:
        self.panes.toggle_view(what)

    def action_toggle_hidden(self) -> None:
        self.panes.toggle_hidden()

    def action_settings(self) -> None:
        self.dialogs.settings()

    def action_export(self) -> None:
        self.dialogs.export()

    def action_help(self) -> None:
        self.dialogs.help()

    # -- themes --------------------------------------------------------------------------
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(LOOM_DEFAULTS)

    def get_css_variables(self) -> dict[str, str]:
        variables = solidify(resolve_references(super().get_css_variables()))
        self.theme_variables = variables
        return variables

    def search_themes(self) -> None:
        """The one Theme command: a palette of loomterm's themes (``Looks.theme_names``)."""
        from textual.command import CommandPalette

        from loomterm.tui.commands import ThemeCommands

        self.push_screen(
            CommandPalette(providers=[ThemeCommands], placeholder="Search for themes\u2026")
        )

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's system commands but its Theme (loomterm's own Theme replaces it)."""
        for command in super().get_system_commands(screen):
            if command.title != "Theme":
                yield command

    def set_theme(self, name: str) -> None:
        self.theme = name

    # -- the engine worker -----------------------------------------------------------
    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            self.ahead.key()  # every key stops thinking ahead first, and waits again
        await super().on_event(event)

    def on_job_finished(self, message: JobFinished) -> None:
        self.progress.job_finished()
        self.jobs.finished(message.label)
        self.ahead.rest()

    def on_job_failed(self, message: JobFailed) -> None:
        error = message.error
        if isinstance(error, LoadAbandoned):
            return  # the editor quit while the model loaded: nothing to say
        if message.label == LOAD_JOB:
            if self.sessions.load_failed(error):
                return  # a session switched to: back to the one left
            # The session cannot open on this model: the command line says why, in one
            # line, as if it had failed before the editor (nothing was written).
            self.load_error = error
            self.exit(return_code=1)
            return
        if isinstance(error, PrefillCancelled):
            self.notify(
                "Stopped reading the text: your edit is kept, and the model reads the rest "
                "when it next needs it",
                timeout=5,
            )
            return
        if message.label == "sync":
            self._failed_sync = self.doc.text
        elif message.label == "save as":
            self.lifecycle.quitting = False  # the name was taken, say: the user tries again
        text = str(error) if isinstance(error, LoomError) else f"{type(error).__name__}: {error}"
        self.log.error(f"job {message.label} failed", error)
        self.notify(
            text.splitlines()[0] if text else type(error).__name__, severity="error", timeout=6
        )

    # -- messages from the controllers' jobs -------------------------------------------
    def on_prefill(self, message: Prefill) -> None:
        self.progress.read(message)

    def on_loading(self, message: Loading) -> None:
        self.progress.loaded(message)

    def on_saved_as(self, message: SavedAs) -> None:
        self.lifecycle.saved_as(message)

    def on_save_state_changed(self, _message: SaveStateChanged) -> None:
        self.refresh_status_soon()  # the session file failed a write, or took one again

    def on_saved_elsewhere(self, message: SavedElsewhere) -> None:
        self.keeping.saved_elsewhere(message.path)

    def on_tidied(self, message: Tidied) -> None:
        self.tidy.tidied(message)

    def on_weave_progress(self, message: WeaveProgress) -> None:
        self.weave.progressed(message)

    def on_weave_done(self, message: WeaveDone) -> None:
        self.weave.done(message)

    def on_export_screen_requested(self, message: ExportScreen.Requested) -> None:
        self.dialogs.export_requested(message.request)

    def on_exported(self, message: Exported) -> None:
        self.dialogs.exported(message)

    def on_moved(self, message: Moved) -> None:
        """A job (a pick, a recompute, a chat turn) made ``message.node``: show it."""
        self.navigation.show_node(message.node)
        if message.then_generate:
            self.jobs.when_idle(lambda: self.generation.generate(1), sync=False)

    def on_generation_started(self, message: GenerationStarted) -> None:
        self.models.picked(message.start, "continued")
        self.generation.started(message)

    def on_tokens_streamed(self, message: TokensStreamed) -> None:
        self.generation.streamed(message)

    def on_tokens_taken_back(self, message: TokensTakenBack) -> None:
        self.generation.taken_back(message)

    def on_generation_done(self, message: GenerationDone) -> None:
        self.generation.done(message)

    def on_session_switched(self, message: SessionSwitched) -> None:
        self.models.session_switched()
        self.sessions.switched(message)

    def on_session_previewed(self, message: SessionPreviewed) -> None:
        self.models.session_switched()
        self.sessions.previewed(message)

    def on_context_assembled(self, message: ContextAssembled) -> None:
        self.context.assembled(message)

    def on_document_view_token_clicked(self, event: DocumentView.TokenClicked) -> None:
        char = event.char
        self.jobs.when_idle(lambda: self.alternatives.show(char))

    def on_document_view_caret_moved(self, event: DocumentView.CaretMoved) -> None:
        run = self.typing_run
        if run.ids:
            node = self.doc.node_before_caret()
            if node is not None and node.id not in run.ids:
                self.typing_run = ops.TypingRun()  # the caret left the run's text
        self.refresh_status_soon()  # the sibling and depth of the caret's branch

    def on_branch_tree_selected(self, event: BranchTree.Selected) -> None:
        self.navigation.go_to(event.chain.last)

    # -- loom events -----------------------------------------------------------------
    def _on_loom_event(self, event: str, node: Node | None) -> None:
        """Loom listener: called on the thread that changed the loom. Token growth
        comes through the streamer instead."""
        if event != "tokens":
            self.post_message(LoomChanged(event, node))

    def on_loom_changed(self, message: LoomChanged) -> None:
        if message.event == "rewrite" and message.node is not None:
            self.doc.forget(message.node)  # its tokens changed in place: decode it again
            self.search.forget_node_text()
        if message.event in CHANGES:
            self.note_change()
        if message.event in ("add", "split", "update", "rewrite"):
            self.rebuild_tree_soon()
        if message.event == "add" and message.node is not None:
            self.unread.added(message.node)
        if message.event == "update" and message.node is not None:
            self.view.redraw()
        self.refresh_status_soon()
        self.models.loom_changed(message)
        self.context.loom_changed(message)
        self.tree_map.changed(message.event)

    # -- syncing typed text ----------------------------------------------------------
    @on(DocumentView.Edited)
    def _text_edited(self, event: DocumentView.Edited) -> None:
        if self.generating:
            self.jobs.cancel.set()  # typing over a generation stops it; the typing wins
        self._failed_sync = None
        self.note_change()
        self.keeping.edited()  # while the model loads: written to the file at once
        doc = self.doc
        if not event.undoing and doc.word_ended():  # a step for undo, as editors coalesce typing
            self.history.push(Place(doc.node or self.loom.root, doc.caret, doc.text))
        if self._sync_timer is not None:
            self._sync_timer.stop()
        self._sync_timer = self.set_timer(self.sync_delay, self.sync_now)
        self.refresh_status_soon()

    def sync_now(self) -> None:
        """Hand the typed text to the engine now (or as soon as it is free)."""
        if self._sync_timer is not None:
            self._sync_timer.stop()
            self._sync_timer = None
        self._sync_due = True
        self.jobs.drain()

    def text_waiting(self) -> bool:
        """Typed text the engine has not got yet (and did not refuse as it is)."""
        return self.doc.dirty and self.doc.text != self._failed_sync

    def sync_due(self) -> bool:
        """The typing paused (or something asked for it): the text should go now."""
        return self._sync_due and self.doc.dirty

    def sync_taken(self, timer: bool) -> None:
        """The next job hands the typed text to the engine itself: no separate sync
        (``timer``: and the pending one is stopped)."""
        if timer and self._sync_timer is not None:
            self._sync_timer.stop()
            self._sync_timer = None
        self._sync_due = False

    def start_sync(self) -> None:
        """Hand the typed text to the engine as one job."""
        self._sync_due = False
        if self._sync_timer is not None:
            self._sync_timer.stop()
            self._sync_timer = None
        doc = self.doc
        base = doc.node or self.loom.root
        keep = doc.shown_tokens
        text = doc.text
        loom = self.loom
        run = self.typing_run

        def job() -> None:
            try:
                node = ops.sync_text(loom, base, text, keep, run)
            except PrefillCancelled as stopped:  # escape: the edit is in the tree whole
                if stopped.node is not None:
                    self.post_message(Synced(stopped.node, text))
                raise
            from loomterm.sessions.session import typed_read

            typed_read(loom)  # the file no longer needs the text typed during a load
            self.post_message(Synced(node, text))

        self.jobs.submit("sync", job)
        self.refresh_status_soon()

    def on_synced(self, message: Synced) -> None:
        doc = self.doc
        if doc.text == message.text:
            doc.show(message.node)
            self.view.document_changed(scroll=False)
        else:
            # More typing arrived meanwhile: it now builds on the synced node.
            doc.rebase(message.node, message.text)
            self._sync_due = True
        self.navigation.arrive(message.node, record=True)
        self.models.picked(message.node, "wrote after")

    # -- text for the panes ------------------------------------------------------------
    def token_text(self, token: int) -> str:
        """One token's text on its own; a token holding part of a character shows its
        bytes (``\\xc3``) rather than a replacement character, a special token its
        written form (``<eos>``)."""
        return self.loom.codec.label(token)

    def node_text(self, node: Node) -> str:
        """A node's own text (for previews), cached per length and tokens (a split
        leaves its tail the node's id: the text it had at that length is not its text)."""
        key = (node.id, len(node.tokens), hash(tuple(node.tokens)))
        text = self._text_cache.get(key)
        if text is None:
            text = self.loom.decode(list(node.tokens))
            self._text_cache[key] = text
        return text

    def rebuild_tree_soon(self) -> None:
        """Rebuild the branch pane shortly (structural changes come in bursts)."""
        if self._tree_timer is None:
            self._tree_timer = self.set_timer(TREE_DELAY, self.rebuild_tree)

    def rebuild_tree(self) -> None:
        """Rebuild the branch pane now (unless it is hidden)."""
        self._tree_timer = None
        self.hoist.mark_outside()  # a hoist read back on opening marks the text above it
        tree = self.branches
        if tree.has_class("-hidden"):
            return
        tree.rebuild(self.hoist.top())
        tree.set_path(self.doc.path, self.doc.node or self.loom.root)

    # -- status ----------------------------------------------------------------------
    def refresh_status_soon(self) -> None:
        """Refresh the status bar shortly (many things change it at once)."""
        if self._status_timer is None:
            self._status_timer = self.set_timer(0.1, self.refresh_status)

    def refresh_status(self) -> None:
        """Refresh the status bar now."""
        self._status_timer = None
        self.caret.soon()  # the session hears the caret once it rests
        loom = self.loom
        state = ""
        if self.loader is not None:
            state = self.loader.state(self.progress.loading_state())
        elif self.progress.prefill is not None:
            state = self.progress.prefill_state()
        elif self.progress.loading is not None:
            state = self.progress.loading_state()
        elif self.generating:
            state = self.weave.state() or self.generation.state()
        elif self.jobs.in_flight:
            state = self.ahead.state() or "working\u2026"
        elif self.doc.dirty:
            state = "edited"
        else:
            state = self.ahead.state(idle=True)
        # Safe while the worker generates: Loom.kv_bytes reads a snapshot of the nodes.
        # It gives the bytes, or a breakdown (.nodes, .working, .total): KV shows the total.
        memory = loom.kv_bytes()
        info = StatusInfo(
            model=loom.runner.name,
            device=loom.runner.where,
            backend="" if self.loader is not None else self._backend(),
            path_tokens=self.doc.shown_tokens,
            nodes=len(loom.tree.nodes) - 1,
            kv_bytes=memory.total,
            tokens_per_second=self.generation.tokens_per_second if self.show_speed else None,
            settings=loom.settings,
            preset=self.presets.label() if loom.settings.preset else "",
            state=state,
            read_only=self.read_only,
            unsaved=self.unsaved,
            place=self.navigation.caret_place(),
            saving=self.keeping.saving(),
        )
        self.status.show_status(info)

    def _backend(self) -> str:
        """The active model's backend, from its record (``status_bar.backend_name``)."""
        loom = self.loom
        return backend_name(loom.model_table.get(loom.active_model))


def run_app(loom: Loom, session_name: str = "") -> None:
    """Run the editor on ``loom`` until the user quits."""
    LoomApp(loom, session_name=session_name).run()


__all__ = ["LoomApp", "run_app"]
