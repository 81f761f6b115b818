"""The loomterm editor: a Textual app over one Loom.

:class:`LoomApp` owns composition (the widgets), the bindings, the engine worker and its
jobs, syncing typed text, and routing the Loom's events. The actions live in
``loomterm.tui.actions``, one mixin per area (navigation, generation, alternatives,
bookmarks, chat, sessions, view, looks, lifecycle), mixed into the app so Textual
dispatches their ``action_*`` and ``on_*`` methods as the app's own.

How work flows:

- Keys edit the :class:`~loomterm.tui.document.DocumentModel` at once; the screen never
  waits on the model. When typing pauses (``sync_delay``), or before anything that needs
  the engine, the text goes to the engine as one ``Loom.edit``.
- All model work runs, one job at a time, in a single thread worker (``_engine_loop``).
  Jobs report back only by posting messages (``loomterm.tui.messages``); the worker
  never touches a widget.
- Navigation (siblings, branch points, undo, the branch pane) only reads the tree, so it
  runs on the UI thread, once no job is in flight and the text is synced
  (:meth:`LoomApp.when_idle`).
- The Loom's own events (from whichever thread changed it) arrive as
  :class:`~loomterm.tui.messages.LoomChanged` and refresh the branch pane and status.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.reactive import var
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerState, get_current_worker

from loomterm.errors import LoomError, PrefillCancelled
from loomterm.tree import Node
from loomterm.tui import ops, paste, sessions
from loomterm.tui.actions import (
    AlternativeActions,
    BookmarkActions,
    ChatActions,
    ContextActions,
    GenerationActions,
    HygieneActions,
    LifecycleActions,
    LookActions,
    NavigationActions,
    PresetActions,
    RatingActions,
    SearchActions,
    SessionActions,
    ViewActions,
    WeaveActions,
)
from loomterm.tui.actions.caret import CaretActions
from loomterm.tui.actions.models import ModelActions
from loomterm.tui.commands import LoomCommands
from loomterm.tui.document import DocumentModel
from loomterm.tui.history import History, Place
from loomterm.tui.keymap import app_bindings
from loomterm.tui.messages import (
    JobFailed,
    JobFinished,
    JobStarted,
    Loading,
    LoomChanged,
    ModelReady,
    Synced,
)
from loomterm.tui.model_loading import LOAD_JOB, StartupLoader
from loomterm.tui.prefs import Prefs, load_prefs
from loomterm.tui.sanitize import safe_line
from loomterm.tui.widgets.branch_tree import BranchTree
from loomterm.tui.widgets.context import ContextView
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.footer import KeyFooter
from loomterm.tui.widgets.shade_legend import ShadeLegend
from loomterm.tui.widgets.status_bar import StatusBar, StatusInfo

if TYPE_CHECKING:
    from textual.driver import Driver

    from loomterm.engine import Loom
    from loomterm.session_open import SessionOpening
    from loomterm.tui.widgets.export_dialog import ExportRequest

TITLE_PUSH = "\x1b[22;2t"  # xterm: save the window title (terminals without it ignore it)
TITLE_POP = "\x1b[23;2t"  # and give it back
CHANGES = frozenset(
    {"add", "split", "update", "rewrite", "settings"}
)  # events that change the session
SYNC_DELAY = 0.4  # seconds of no typing before the text goes to the engine
TREE_DELAY = 0.15  # structural changes are batched this long before the pane rebuilds
Job = Callable[[], None]


class EditorScreen(Screen):
    """The editor's main screen. The document takes the keyboard from the first frame:
    keys typed while the editor starts (the terminal hands them over at once, before
    ``on_mount`` could move the focus) are text, not branch-pane keys."""

    AUTO_FOCUS = "#document"


class LoomApp(
    ModelActions,
    HygieneActions,  # before NavigationActions: its undo and redo wrap navigation's
    NavigationActions,
    GenerationActions,
    AlternativeActions,
    BookmarkActions,
    ChatActions,
    PresetActions,
    SessionActions,
    ViewActions,
    LookActions,
    LifecycleActions,
    WeaveActions,
    SearchActions,
    RatingActions,
    ContextActions,
    CaretActions,
    App[None],
):
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
        # Opening with the model still to load: ``loom`` is the session file's preview
        # until the loader's job brings the real Loom (``tui.model_loading``).
        self.loader = StartupLoader(self, opening) if opening is not None else None
        self.load_error: BaseException | None = None
        self.session_name = session_name
        self.show_speed = show_speed
        self.sync_delay = sync_delay
        self.export_dir = export_dir
        self.last_export: ExportRequest | None = None  # the dialog opens on its choices
        self.prefs: Prefs = load_prefs()
        self.doc = self._new_document(loom)
        self.history = History()
        self._jobs: queue.SimpleQueue[tuple[str, Job] | None] = queue.SimpleQueue()
        self._jobs_in_flight = 0
        self._cancel = threading.Event()
        # Set by escape while the model reads a long text (an edit near the top, say):
        # the engine stops between two chunks (Loom.interrupt). Cleared per job.
        self._interrupt = threading.Event()
        # Reading in progress: (done, total, done at the first report, its time).
        self._prefill: tuple[int, int, int, float] | None = None
        self._loading: tuple[str, int, int | None] | None = None  # stage, done, total
        self._deferred: list[tuple[Callable[[], None], bool]] = []
        self._after_generation: Callable[[], None] | None = None
        self._sync_due = False
        self._sync_timer: Timer | None = None
        # The nodes this run of typing writes into (``ops.TypingRun``): a new run
        # begins when the caret leaves them, a generation starts or on "branch here".
        self.typing_run = ops.TypingRun()
        self._failed_sync: str | None = None
        self._tree_timer: Timer | None = None
        self._status_timer: Timer | None = None
        self._tokens_per_second: float | None = None
        self._last_seen: dict[int, Node] = {}  # node id -> deepest node last shown below it
        self._text_cache: dict[tuple[int, int, int], str] = {}
        self._quitting = False
        self._locks = 0  # reasons the document refuses edits just now
        self._locked_jobs: set[str] = set()
        self._generation_lock = False
        self.read_only = sessions.is_read_only(loom)
        self.unsaved = False  # a read-only session was changed (in memory only)
        self._make_widgets()

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
        yield self.model_legend()
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
        self._load_themes()
        self._load_keymap()
        self.loom.subscribe(self._on_loom_event)
        self._attach_engine(self.loom)
        self._engine_loop()
        if self.loader is not None:
            self.loader.start()  # the engine's first job: what waits for it waits in order
        cursor = self.loom.cursor
        self.doc.show(cursor)
        self.place_saved_caret(cursor)  # where the user left it (else the end)
        if self.loader is not None:
            self.loader.caret_at_start = self.doc.caret
        self.history.push(Place(cursor, self.doc.caret))
        self._remember(cursor)
        self.view.focus()
        self.view.placeholder = self.start_hint()
        self.fit_tree()
        self.show_title()
        self.call_after_refresh(self._after_first_layout)

    def on_resize(self, event: events.Resize) -> None:
        self.fit_tree(event.size.width)

    def _after_first_layout(self) -> None:
        self.view.document_changed()
        self._rebuild_tree()
        self._refresh_status()

    def _attach_engine(self, loom: Loom) -> None:
        """Hear ``loom``'s prefill progress (the status bar), and let escape stop it."""
        loom.progress = self._on_progress
        loom.interrupt = self._interrupt

    def on_unmount(self) -> None:
        self.report_caret()  # quitting: the caret as it is now, not as it last settled
        self.loom.unsubscribe(self._on_loom_event)
        self.loom.progress = None
        self.loom.interrupt = None
        self._cancel.set()
        self._jobs.put(None)
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
            self._refresh_status_soon()
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
                self.place_saved_caret(node)  # the session records where it was left
            else:
                self.doc.move_to(min(caret, self.doc.length))
            self.view.document_changed(scroll=False)
        self._text_cache.clear()
        self.models_changed()
        self.show_model_notes()
        self._rebuild_tree_soon()
        self.refresh_bindings()
        for run in loader.take_waiting():
            self.call_later(run)
        self._refresh_status_soon()

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
            return self.generating or self._prefill is not None
        return True

    def watch_generating(self) -> None:
        self.refresh_bindings()

    # -- the engine worker -----------------------------------------------------------
    @work(thread=True, exclusive=True, group="engine", name="engine", exit_on_error=False)
    def _engine_loop(self) -> None:
        """Run submitted jobs one at a time, for the life of the app."""
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                item = self._jobs.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is None:
                return
            label, job = item
            self._interrupt.clear()  # an escape meant for an earlier job stops nothing
            self.post_message(JobStarted(label))
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - reported to the user, app goes on
                self.post_message(JobFailed(label, exc))
            finally:
                self.post_message(JobFinished(label))

    def submit(self, label: str, job: Job, lock: bool = False) -> None:
        """Queue model work for the worker. ``lock`` holds edits back until the job is
        done (its result replaces the document, which would drop the typing)."""
        self._jobs_in_flight += 1
        if lock:
            self._lock()
            self._locked_jobs.add(label)
        self._jobs.put((label, job))

    def _lock(self) -> None:
        self._locks += 1
        self.view.locked = True

    def _unlock(self) -> None:
        self._locks = max(0, self._locks - 1)
        self.view.locked = self._locks > 0

    @property
    def busy(self) -> bool:
        return self._jobs_in_flight > 0 or self.generating

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker failures surface (harlequin-style)."""
        if event.worker.name == "engine" and event.state == WorkerState.ERROR:
            self.notify(f"engine worker stopped: {event.worker.error}", severity="error")
            if not self._quitting:
                self._engine_loop()

    def on_job_finished(self, message: JobFinished) -> None:
        self._jobs_in_flight = max(0, self._jobs_in_flight - 1)
        if self._prefill is not None:
            self._prefill = None
            self.refresh_bindings()
        self._loading = None
        if message.label in self._locked_jobs:
            self._locked_jobs.discard(message.label)
            self._unlock()
        self._refresh_status_soon()
        self._drain()

    def on_job_failed(self, message: JobFailed) -> None:
        error = message.error
        if message.label == LOAD_JOB:
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
            self._quitting = False  # the name was taken, say: the user tries again
        text = str(error) if isinstance(error, LoomError) else f"{type(error).__name__}: {error}"
        self.log.error(f"job {message.label} failed", error)
        self.notify(
            text.splitlines()[0] if text else type(error).__name__, severity="error", timeout=6
        )

    def when_idle(
        self, action: Callable[[], None], *, sync: bool = True, stop: bool = False
    ) -> None:
        """Run ``action`` once no job is in flight (and, with ``sync``, once the engine
        has the typed text). ``stop`` first stops a running generation."""
        if stop and self.generating:
            self._cancel.set()
        self._deferred.append((action, sync))
        self._drain()

    def _drain(self) -> None:
        while self._deferred and not self.busy:
            action, sync = self._deferred[0]
            if sync and self.doc.dirty and self.doc.text != self._failed_sync:
                self._start_sync()
                return
            self._deferred.pop(0)
            action()
        if not self.busy and self._sync_due and self.doc.dirty:
            self._start_sync()

    # -- loom events -----------------------------------------------------------------
    def _on_loom_event(self, event: str, node: Node | None) -> None:
        """Loom listener: called on the thread that changed the loom. Token growth
        comes through the streamer instead."""
        if event != "tokens":
            self.post_message(LoomChanged(event, node))

    def on_loom_changed(self, message: LoomChanged) -> None:
        if message.event == "rewrite" and message.node is not None:
            self.doc.forget(message.node)  # its tokens changed in place: decode it again
            self.forget_node_text()
        if message.event in CHANGES:
            self._note_change()
        if message.event in ("add", "split", "update", "rewrite"):
            self._rebuild_tree_soon()
        if message.event == "update" and message.node is not None:
            self.view.redraw()
        self._refresh_status_soon()

    # -- syncing typed text ----------------------------------------------------------
    @on(DocumentView.Edited)
    def _text_edited(self, event: DocumentView.Edited) -> None:
        if self.generating:
            self._cancel.set()  # typing over a generation stops it; the typing wins
        self._failed_sync = None
        self._note_change()
        doc = self.doc
        if doc.word_ended():  # a step for undo, as text editors coalesce typing
            self.history.push(Place(doc.node or self.loom.root, doc.caret, doc.text))
        if self._sync_timer is not None:
            self._sync_timer.stop()
        self._sync_timer = self.set_timer(self.sync_delay, self.sync_now)
        self._refresh_status_soon()

    def sync_now(self) -> None:
        """Hand the typed text to the engine now (or as soon as it is free)."""
        if self._sync_timer is not None:
            self._sync_timer.stop()
            self._sync_timer = None
        self._sync_due = True
        self._drain()

    def _start_sync(self) -> None:
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
            self.post_message(Synced(node, text))

        self.submit("sync", job)
        self._refresh_status_soon()

    def on_synced(self, message: Synced) -> None:
        doc = self.doc
        if doc.text == message.text:
            doc.show(message.node)
            self.view.document_changed(scroll=False)
        else:
            # More typing arrived meanwhile: it now builds on the synced node.
            doc.rebase(message.node, message.text)
            self._sync_due = True
        self._arrive(message.node, record=True)

    # -- text for the panes ------------------------------------------------------------
    def token_text(self, token: int) -> str:
        """One token's text on its own; a token holding part of a character shows its
        bytes (``\\xc3``) rather than a replacement character."""
        return self.loom.codec.token_bytes(token).decode("utf-8", errors="backslashreplace")

    def node_text(self, node: Node) -> str:
        """A node's own text (for previews), cached per length and tokens (a split
        leaves its tail the node's id: the text it had at that length is not its text)."""
        key = (node.id, len(node.tokens), hash(tuple(node.tokens)))
        text = self._text_cache.get(key)
        if text is None:
            text = self.loom.decode(list(node.tokens))
            self._text_cache[key] = text
        return text

    def _rebuild_tree_soon(self) -> None:
        if self._tree_timer is None:
            self._tree_timer = self.set_timer(TREE_DELAY, self._rebuild_tree)

    def _rebuild_tree(self) -> None:
        self._tree_timer = None
        tree = self.branches
        if tree.has_class("-hidden"):
            return
        tree.rebuild(self.loom.root)
        tree.set_path(self.doc.path, self.doc.node or self.loom.root)

    # -- status ----------------------------------------------------------------------
    def _refresh_status_soon(self) -> None:
        if self._status_timer is None:
            self._status_timer = self.set_timer(0.1, self._refresh_status)

    def _refresh_status(self) -> None:
        self._status_timer = None
        self._caret_soon()  # the session hears the caret once it rests
        loom = self.loom
        state = ""
        if self.loader is not None:
            state = self.loader.state(self.loading_state())
        elif self._prefill is not None:
            state = self.prefill_state()
        elif self._loading is not None:
            state = self.loading_state()
        elif self.generating:
            state = self.weave_state() or self.generation_state()
        elif self._jobs_in_flight:
            state = "working\u2026"
        elif self.doc.dirty:
            state = "edited"
        # Safe while the worker generates: Loom.kv_bytes reads a snapshot of the nodes.
        # It gives the bytes, or a breakdown (.nodes, .working, .total): KV shows the total.
        memory = loom.kv_bytes()
        info = StatusInfo(
            model=loom.runner.name,
            device=loom.runner.where,
            path_tokens=self.doc.shown_tokens,
            nodes=len(loom.tree.nodes) - 1,
            kv_bytes=memory.total,
            tokens_per_second=self._tokens_per_second if self.show_speed else None,
            settings=loom.settings,
            preset=self.preset_label() if loom.settings.preset else "",
            state=state,
            read_only=self.read_only,
            unsaved=self.unsaved,
            place=self.caret_place(),
        )
        self.status.show_status(info)


def run_app(loom: Loom, session_name: str = "") -> None:
    """Run the editor on ``loom`` until the user quits."""
    LoomApp(loom, session_name=session_name).run()


__all__ = ["LoomApp", "run_app"]
