"""The loomterm editor: a Textual app over one Loom.

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
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Footer
from textual.worker import Worker, WorkerState, get_current_worker

from loomterm.errors import LoomError
from loomterm.tree import Node, Origin
from loomterm.tui import chat, ops
from loomterm.tui.commands import LoomCommands
from loomterm.tui.document import DocumentModel
from loomterm.tui.history import History, Place
from loomterm.tui.keymap import ACTIONS, KeymapError, app_bindings, keymap_path, load_keymap
from loomterm.tui.messages import (
    Exported,
    GenerationDone,
    GenerationStarted,
    JobFailed,
    JobFinished,
    JobStarted,
    LoomChanged,
    Moved,
    SessionSwitched,
    Synced,
    TokensStreamed,
)
from loomterm.tui.prefs import Prefs, load_prefs, save_prefs
from loomterm.tui.sanitize import safe_line
from loomterm.tui.themes import DEFAULT_THEME, LOOM_DEFAULTS, load_themes, resolve_references
from loomterm.tui.widgets.alternatives import Alternative, AlternativesScreen, Pick, shown_piece
from loomterm.tui.widgets.branch_tree import BranchTree, is_hidden, visible_children
from loomterm.tui.widgets.dialogs import (
    ChatRequest,
    ChatScreen,
    ConfirmScreen,
    TurnRequest,
    TurnScreen,
)
from loomterm.tui.widgets.document_view import DocumentView
from loomterm.tui.widgets.export_dialog import ExportRequest, ExportScreen
from loomterm.tui.widgets.help import HelpRow, HelpScreen
from loomterm.tui.widgets.settings import SettingsScreen
from loomterm.tui.widgets.status_bar import StatusBar, StatusInfo

if TYPE_CHECKING:
    from loomterm.engine import Loom

SYNC_DELAY = 0.4  # seconds of no typing before the text goes to the engine
STREAM_INTERVAL = 0.03  # streamed tokens are posted at most this often
TREE_DELAY = 0.15  # structural changes are batched this long before the pane rebuilds
Job = Callable[[], None]


def _kv_bytes(loom: Loom) -> int:
    """``loom.kv_bytes()`` safe to call from the UI thread while the worker generates:
    it iterates a copy of the node table (copying a dict is atomic under the GIL), where
    ``Loom.kv_bytes`` iterates the live dict without the engine lock and raised
    "dictionary changed size during iteration" when a generation added a node."""
    from loomterm.engine.kvcache import kv_bytes

    return kv_bytes(list(loom.tree.nodes.values()))


class Streamer:
    """Collects streamed tokens in the worker and posts them in small batches, so a fast
    model does not flood the UI with one message per token."""

    def __init__(self, app: LoomApp) -> None:
        self.app = app
        self.first: Node | None = None
        self.start = 0
        self.shown = 0
        self.pieces: list[str] = []
        self.total = 0
        self.began = time.monotonic()
        self.last_post = self.began

    def on_token(self, node: Node, token_id: int, piece: str) -> None:
        self.total += 1
        if self.first is None:
            self.first = node
        if node is self.first:
            self.pieces.append(piece)
        now = time.monotonic()
        if now - self.last_post >= STREAM_INTERVAL:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.first is not None and self.pieces:
            self.app.post_message(
                TokensStreamed(self.first, self.shown, self.pieces, self.total, now - self.began)
            )
            self.shown += len(self.pieces)
            self.pieces = []
        self.last_post = now

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.began


class LoomApp(App[None]):
    """A terminal loom over ``loom``. ``session_name`` names the session in titles and
    exports; ``show_speed`` False keeps tok/s out of the status bar (for snapshots)."""

    TITLE = "loomterm"
    generating: var[bool] = var(False)
    """True from the moment a generation is asked for until it has ended."""
    COMMANDS = App.COMMANDS | {LoomCommands}
    BINDINGS: ClassVar[list[BindingType]] = app_bindings()
    CSS = """
    #main { height: 1fr; }
    #tree {
        width: 34%;
        min-width: 24;
        max-width: 64;
        border-right: vkey $panel-lighten-1;
    }
    #tree.-hidden { display: none; }
    #document { width: 1fr; }
    """

    def __init__(
        self,
        loom: Loom,
        *,
        session_name: str = "",
        show_speed: bool = True,
        sync_delay: float = SYNC_DELAY,
        export_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.loom = loom
        self.session_name = session_name
        self.show_speed = show_speed
        self.sync_delay = sync_delay
        self.export_dir = export_dir
        self.prefs: Prefs = load_prefs()
        self.doc = self._new_document(loom)
        self.history = History()
        self._jobs: queue.SimpleQueue[tuple[str, Job] | None] = queue.SimpleQueue()
        self._jobs_in_flight = 0
        self._cancel = threading.Event()
        self._deferred: list[tuple[Callable[[], None], bool]] = []
        self._after_generation: Callable[[], None] | None = None
        self._sync_due = False
        self._sync_timer: Timer | None = None
        self._failed_sync: str | None = None
        self._tree_timer: Timer | None = None
        self._status_timer: Timer | None = None
        self._tokens_per_second: float | None = None
        self._last_seen: dict[int, Node] = {}  # node id -> deepest node last shown below it
        self._text_cache: dict[tuple[int, int], str] = {}
        self._quitting = False
        self._locks = 0  # reasons the document refuses edits just now
        self._locked_jobs: set[str] = set()
        self._generation_lock = False
        self._make_widgets()

    def _new_document(self, loom: Loom) -> DocumentModel:
        codec = loom.text_codec
        special = set(codec.special_ids) | set(codec.added_ids)
        return DocumentModel(codec.token_bytes, special)

    # -- composition -----------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield self.branches
            yield self.view
        yield self.status
        yield Footer(compact=True)

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
        self.view.approx_marks = self.prefs.approx
        self.status = StatusBar(id="status")

    def on_mount(self) -> None:
        self._load_themes()
        self._load_keymap()
        self.loom.subscribe(self._on_loom_event)
        self._engine_loop()
        cursor = self.loom.cursor
        self.doc.show(cursor)
        self.doc.move_to(self.doc.length)
        self.history.push(Place(cursor, self.doc.caret))
        self._remember(cursor)
        self.view.focus()
        self.call_after_refresh(self._after_first_layout)

    def _after_first_layout(self) -> None:
        self.view.document_changed()
        self._rebuild_tree()
        self._refresh_status()

    def on_unmount(self) -> None:
        self.loom.unsubscribe(self._on_loom_event)
        self._cancel.set()
        self._jobs.put(None)

    # -- themes and keys -------------------------------------------------------------
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(LOOM_DEFAULTS)

    def get_css_variables(self) -> dict[str, str]:
        variables = resolve_references(super().get_css_variables())
        self.theme_variables = variables
        return variables

    def _load_themes(self) -> None:
        themes, problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        for problem in problems:
            self.notify(problem, severity="warning")
        wanted = self.prefs.theme
        self.theme = wanted if wanted in self.available_themes else DEFAULT_THEME
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Any) -> None:
        self.prefs.theme = theme.name
        save_prefs(self.prefs)

    def set_theme(self, name: str) -> None:
        self.theme = name

    def _load_keymap(self) -> None:
        try:
            keymap = load_keymap()
        except KeymapError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return
        known = {action.id for action in ACTIONS} | {
            b.id for b in DocumentView.BINDINGS if isinstance(b, Binding) and b.id
        }
        unknown = sorted(set(keymap) - known)
        if unknown:
            self.notify(f"key map: unknown action ids {', '.join(unknown)}", severity="warning")
        self.set_keymap({k: v for k, v in keymap.items() if k in known})

    def keys_by_id(self) -> dict[str, str]:
        """The key (as displayed) that runs each action now, key map applied."""
        keys = {}
        keymap = getattr(self, "_keymap", {}) or {}
        for action in ACTIONS:
            key = keymap.get(action.id, action.key)
            if key:
                first = key.split(",")[0].strip()
                keys[action.id] = self.get_key_display(Binding(first, action.action))
        return keys

    def help_rows(self) -> list[HelpRow]:
        keys = self.keys_by_id()
        rows: list[HelpRow] = [
            (action.group, keys.get(action.id, "palette"), action.title, action.help)
            for action in ACTIONS
        ]
        rows.append(
            (
                "Palette",
                self.get_key_display(Binding("ctrl+p", "")),
                "Command palette",
                "Find any action, theme or bookmark by name.",
            )
        )
        keymap = getattr(self, "_keymap", {}) or {}
        for binding in DocumentView.BINDINGS:
            assert isinstance(binding, Binding)
            key = keymap.get(binding.id or "", binding.key)
            rows.append(
                (
                    "Edit",
                    self.get_key_display(Binding(key.split(",")[0], "")),
                    binding.description,
                    "Caret movement and editing in the text.",
                )
            )
        rows.append(
            (
                "Edit",
                "type / paste",
                "Edit",
                "Text changes at once; the engine catches up when typing pauses.",
            )
        )
        rows.append(
            (
                "Edit",
                "right-click",
                "Alternatives",
                "Right-click, ctrl+click or double-click a token for its alternatives.",
            )
        )
        return rows

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
        if message.label in self._locked_jobs:
            self._locked_jobs.discard(message.label)
            self._unlock()
        self._refresh_status_soon()
        self._drain()

    def on_job_failed(self, message: JobFailed) -> None:
        error = message.error
        if message.label == "sync":
            self._failed_sync = self.doc.text
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
        if message.event in ("add", "split", "update"):
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

        def job() -> None:
            node = ops.sync_text(loom, base, text, keep)
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

    # -- going places ----------------------------------------------------------------
    def _arrive(self, node: Node, record: bool = True) -> None:
        """The document now stands on ``node``: tell the engine, history, the pane."""
        if self.loom.cursor is not node:
            self.loom.cursor = node
        if record:
            self.history.push(Place(node, self.doc.caret))
        self._remember(node)
        tree = self.branches
        if tree.display and not tree.has_class("-hidden"):
            tree.set_path(self.doc.path, node)
        self._refresh_status_soon()

    def _remember(self, node: Node) -> None:
        for item in node.path():
            self._last_seen[item.id] = node

    def show_node(self, node: Node, caret: int | None = None, record: bool = True) -> None:
        """Show ``node``'s path with the caret at ``caret`` (default: the end)."""
        self.doc.show(node)
        self.doc.move_to(self.doc.length if caret is None else caret)
        self.view.follow = self.doc.caret >= self.doc.length
        self.view.document_changed()
        self._arrive(node, record=record)

    def go_to_node(self, node: Node) -> None:
        """Move the document to ``node`` (branch pane, bookmarks)."""
        self.when_idle(lambda: self.show_node(node), stop=True)

    def _leaf_below(self, node: Node) -> Node:
        """Where to land when entering ``node``'s subtree: where the user last was below
        it, else the newest visible branch."""
        seen = self._last_seen.get(node.id)
        if seen is not None and node.is_ancestor_of(seen) and seen.id in self.loom.tree.nodes:
            return seen
        show_hidden = self.branches.show_hidden
        while True:
            kids = visible_children(node, show_hidden)
            if not kids:
                return node
            node = kids[-1]

    def _caret_node(self) -> Node | None:
        return self.doc.node_before_caret()

    def action_sibling(self, step: int) -> None:
        self.when_idle(lambda: self._sibling(step), stop=True)

    def _sibling(self, step: int) -> None:
        node = self._caret_node()
        if node is None or node.parent is None:
            self.bell()
            return
        show_hidden = self.branches.show_hidden
        siblings = [s for s in node.parent.children if show_hidden or not is_hidden(s) or s is node]
        if len(siblings) < 2:
            self.notify("No other branch here", timeout=2)
            return
        target = siblings[(siblings.index(node) + step) % len(siblings)]
        self._enter(target)

    def _enter(self, target: Node) -> None:
        """Show ``target``'s branch with the caret at the end of ``target``'s text."""
        leaf = self._leaf_below(target)
        self.doc.show(leaf)
        end = self.doc.end_of(target)
        self.doc.move_to(self.doc.length if end is None else end)
        self.view.follow = False
        self.view.document_changed()
        self._arrive(leaf)

    def action_branch_point(self, step: int) -> None:
        self.when_idle(lambda: self._branch_point(step), stop=True)

    def _branch_point(self, step: int) -> None:
        path = self.doc.path
        node = self._caret_node()
        if node is None or node not in path:
            self.bell()
            return
        index = path.index(node)
        show_hidden = self.branches.show_hidden
        order = range(index - 1, 0, -1) if step < 0 else range(index + 1, len(path))
        for i in order:
            candidate = path[i]
            if (
                candidate.parent is not None
                and len(visible_children(candidate.parent, show_hidden)) > 1
            ):
                end = self.doc.end_of(candidate)
                if end is not None:
                    self.doc.move_to(end)
                    self.view.caret_moved()
                    return
        self.notify("No branch point " + ("above" if step < 0 else "below"), timeout=2)

    def action_undo(self) -> None:
        self.when_idle(self._undo, stop=True)

    def _undo(self) -> None:
        place = self.history.undo()
        if place is None:
            self.notify("Nothing to undo", timeout=2)
            return
        self.show_node(place.node, place.caret, record=False)

    def action_redo(self) -> None:
        self.when_idle(self._redo, stop=True)

    def _redo(self) -> None:
        place = self.history.redo()
        if place is None:
            self.notify("Nothing to redo", timeout=2)
            return
        self.show_node(place.node, place.caret, record=False)

    @on(BranchTree.Selected)
    def _tree_selected(self, event: BranchTree.Selected) -> None:
        self.go_to_node(event.chain.last)

    # -- generating ------------------------------------------------------------------
    def action_generate(self) -> None:
        self.when_idle(lambda: self._generate(1), sync=False)

    def action_generate_n(self) -> None:
        n = int(self.loom.settings.get("n", 1))
        self.when_idle(lambda: self._generate(max(1, n)), sync=False)

    def action_regenerate(self) -> None:
        self.when_idle(self._regenerate)

    def _regenerate(self) -> None:
        node = self._caret_node()
        if node is None or node.origin is not Origin.MODEL:
            node = self.doc.node
        if node is None or node.origin is not Origin.MODEL:
            self.notify("No generated text here to regenerate: ctrl+g generates", timeout=3)
            return
        # Walk up to the whole generation (truncates may have split it).
        while (
            node.parent is not None
            and node.parent.origin is Origin.MODEL
            and node.parent.created == node.created
            and len(node.parent.children) == 1
        ):
            node = node.parent
        assert node.parent is not None
        self._generate(1, start=node.parent)

    def _generate(
        self, n: int, start: Node | None = None, then: Callable[[], None] | None = None
    ) -> None:
        if self.generating:
            self.bell()
            return
        loom = self.loom
        doc = self.doc
        base = doc.node or loom.root
        text = doc.text if (start is None and doc.dirty) else None
        keep = doc.shown_tokens
        caret = doc.caret if start is None and doc.caret < doc.length else None
        settings = dict(loom.settings)
        max_new = int(settings.get("max_new_tokens", 128))
        sampling = ops.sampling_kwargs(settings)
        if text is not None and self._sync_timer is not None:
            self._sync_timer.stop()  # the generation job syncs the text itself
            self._sync_timer = None
        self._sync_due = False
        cancel = self._cancel
        cancel.clear()
        self.generating = True
        self._generation_lock = True
        self._lock()  # until the generation starts: the cut at the caret is not made yet
        self._refresh_status_soon()

        def job() -> None:
            node = start if start is not None else base
            kids: list[Node] = []
            streamer = Streamer(self)
            try:
                if text is not None:
                    node = ops.sync_text(loom, base, text, keep)
                elif start is None and keep < base.end:
                    node = loom.truncate(base, keep)
                if caret is not None:
                    position, partial = ops.split_at_char(loom, node, caret)
                    node = ops.start_point(loom, node, position, partial)
                if node.end == 0:
                    raise LoomError("nothing to continue from: type something first")
                if cancel.is_set():
                    return
                self.post_message(GenerationStarted(node, "", n))
                streamer = Streamer(self)
                kids = loom.generate(
                    node, max_new, n=n, on_token=streamer.on_token, cancel=cancel, **sampling
                )
                streamer.flush()
            finally:
                self.post_message(GenerationDone(node, kids, streamer.total, streamer.seconds))

        self._after_generation = then
        self.submit("generate", job)

    def _release_generation_lock(self) -> None:
        if self._generation_lock:
            self._generation_lock = False
            self._unlock()

    def on_generation_started(self, message: GenerationStarted) -> None:
        self.doc.show(message.start)
        self.doc.move_to(self.doc.length)
        self.view.follow = True
        self._release_generation_lock()
        self.view.document_changed()
        self._arrive(message.start, record=False)

    def on_tokens_streamed(self, message: TokensStreamed) -> None:
        if self.show_speed and message.seconds > 0:
            self._tokens_per_second = message.total / message.seconds
        follow = self.view.follow
        if self.doc.extend(message.node, message.start, message.pieces):
            if follow:
                self.doc.move_to(self.doc.length)
            self.view.document_changed(scroll=follow)
        self._refresh_status_soon()

    def on_generation_done(self, message: GenerationDone) -> None:
        self.generating = False
        self._release_generation_lock()
        if self.show_speed and message.seconds > 0 and message.total:
            self._tokens_per_second = message.total / message.seconds
        doc = self.doc
        target = message.kids[0] if message.kids else message.start
        if not doc.dirty:
            follow = self.view.follow
            caret = doc.caret
            doc.show(target)
            doc.move_to(doc.length if follow else caret)
            self.view.document_changed(scroll=follow)
            self._arrive(target)
        elif message.kids:
            self.loom.cursor = target  # typed-over text syncs from what was shown
        then, self._after_generation = self._after_generation, None
        if then is not None and message.kids:
            then()
        self._refresh_status_soon()
        self._drain()

    def watch_generating(self) -> None:
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.generating
        return True

    def action_stop(self) -> None:
        if self.generating:
            self._cancel.set()
        elif self.focused is self.branches:
            self.view.focus()

    # -- token alternatives ----------------------------------------------------------
    def action_alternatives(self) -> None:
        self.when_idle(lambda: self._alternatives(None))

    @on(DocumentView.TokenClicked)
    def _token_clicked(self, event: DocumentView.TokenClicked) -> None:
        char = event.char
        self.when_idle(lambda: self._alternatives(char))

    def _alternatives(self, char: int | None) -> None:
        doc = self.doc
        found = doc.token_under_caret() if char is None else doc.token_at(min(char, doc.length - 1))
        if found is None:
            self.notify("No token here", timeout=2)
            return
        node, index, position = found
        top = node.top[index] if index < len(node.top) else None
        if not top:
            self.notify(
                "No alternatives were recorded for this token (typed text has none)", timeout=3
            )
            return
        chosen = node.tokens[index]
        loom = self.loom
        rows = [Alternative(t, self.token_text(t), lp, chosen=t == chosen) for t, lp in top]
        title = f"Alternatives at token {position} (now {shown_piece(self.token_text(chosen))})"
        base = doc.node or node

        def picked(pick: Pick | None) -> None:
            if pick is None:
                return

            def job() -> None:
                branch = loom.pick(base, position, pick.token_id)
                self.post_message(Moved(branch, then_generate=pick.generate))

            self.when_idle(lambda: self.submit("pick", job, lock=True))

        self.push_screen(AlternativesScreen(title, rows), picked)

    def on_moved(self, message: Moved) -> None:
        self.show_node(message.node)
        if message.then_generate:
            self.when_idle(lambda: self._generate(1), sync=False)

    # -- view ------------------------------------------------------------------------
    def action_toggle_tree(self) -> None:
        tree = self.branches
        tree.toggle_class("-hidden")
        self.prefs.tree = not tree.has_class("-hidden")
        save_prefs(self.prefs)
        if self.prefs.tree:
            self._rebuild_tree()
        elif self.focused is tree:
            self.view.focus()

    def action_focus_tree(self) -> None:
        tree = self.branches
        if self.focused is tree:
            self.view.focus()
            return
        if tree.has_class("-hidden"):
            self.action_toggle_tree()
        tree.focus()

    def action_focus_document(self) -> None:
        self.view.focus()

    def action_toggle_view(self, what: str) -> None:
        view = self.view
        if what == "boundaries":
            view.boundaries = self.prefs.boundaries = not view.boundaries
        elif what == "probabilities":
            view.probabilities = self.prefs.probabilities = not view.probabilities
        elif what == "approx":
            view.approx_marks = self.prefs.approx = not view.approx_marks
        save_prefs(self.prefs)

    def action_toggle_hidden(self) -> None:
        tree = self.branches
        tree.show_hidden = self.prefs.show_hidden = not tree.show_hidden
        save_prefs(self.prefs)
        self._rebuild_tree()
        self.notify(
            "Showing archived branches" if tree.show_hidden else "Archived branches hidden",
            timeout=2,
        )

    def token_text(self, token: int) -> str:
        """One token's text on its own; a token holding part of a character shows its
        bytes (``\\xc3``) rather than a replacement character."""
        return self.loom.text_codec.token_bytes(token).decode("utf-8", errors="backslashreplace")

    def node_text(self, node: Node) -> str:
        """A node's own text (for previews), cached per length."""
        key = (node.id, len(node.tokens))
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
        loom = self.loom
        state = ""
        if self.generating:
            state = "generating\u2026 esc stops"
        elif self._jobs_in_flight:
            state = "working\u2026"
        elif self.doc.dirty:
            state = "edited"
        info = StatusInfo(
            model=loom.loaded.name,
            device=str(loom.loaded.device),
            path_tokens=self.doc.shown_tokens,
            nodes=len(loom.tree.nodes) - 1,
            kv_bytes=_kv_bytes(loom),
            tokens_per_second=self._tokens_per_second if self.show_speed else None,
            settings=loom.settings,
            state=state,
        )
        self.status.show_status(info)

    # -- settings, export, help --------------------------------------------------------
    def action_settings(self) -> None:
        def saved(values: dict[str, Any] | None) -> None:
            if values:
                self.loom.update_settings(**values)
                self._refresh_status()
                self.notify("Settings saved with the session", timeout=2)

        self.push_screen(SettingsScreen(self.loom.settings), saved)

    def action_export(self) -> None:
        from loomterm.export import FORMATS

        folder = self.export_dir or Path.cwd()
        stem = self.session_name or "loomterm"

        def chosen(request: ExportRequest | None) -> None:
            if request is None:
                return
            loom = self.loom

            def job() -> None:
                ops.export_session(loom, request.path, request.fmt, request.branch)
                self.post_message(Exported(request.path, request.fmt))

            self.when_idle(lambda: self.submit("export", job))

        self.push_screen(ExportScreen(FORMATS, folder, stem), chosen)

    def on_exported(self, message: Exported) -> None:
        self.notify(f"Exported {message.fmt} to {message.path}", timeout=4)

    def action_help(self) -> None:
        where = keymap_path()
        self.push_screen(
            HelpScreen(self.help_rows(), str(where or "keymap.toml in the config folder"))
        )

    # -- bookmarks and archiving -----------------------------------------------------------
    def bookmarks(self) -> list[tuple[Node, str]]:
        marks = []
        for node in list(self.loom.tree.nodes.values()):  # the worker may be adding
            if node.meta.get("bookmark"):
                marks.append((node, safe_line(self.loom.text(node)[-40:].strip()) or "(empty)"))
        return marks

    def _set_meta(self, node: Node, **changes: Any) -> None:
        loom = self.loom

        def job() -> None:
            ops.set_meta(loom, node, **changes)

        self.submit("meta", job)

    def action_bookmark(self) -> None:
        node = self._caret_node() or self.doc.node
        if node is None or node.parent is None:
            self.bell()
            return
        marked = bool(node.meta.get("bookmark"))
        self._set_meta(node, bookmark=None if marked else True)
        self.notify("Bookmark removed" if marked else "Bookmarked", timeout=2)

    def action_next_bookmark(self) -> None:
        marks = [node for node, _ in self.bookmarks()]
        if not marks:
            self.notify("No bookmarks yet (alt+s sets one)", timeout=2)
            return
        current = self._caret_node()
        ids = [n.id for n in marks]
        after = [n for n in marks if current is None or n.id > current.id]
        target = after[0] if after else marks[ids.index(min(ids))]
        self.when_idle(lambda: self._enter(target), stop=True)

    def _branch_root(self, node: Node) -> Node:
        """The first node of the branch holding ``node``: below the nearest branch point."""
        while (
            node.parent is not None
            and node.parent.parent is not None
            and len(node.parent.children) == 1
        ):
            node = node.parent
        return node

    def action_hide_branch(self) -> None:
        node = self._caret_node() or self.doc.node
        if node is None or node.parent is None:
            self.bell()
            return
        branch = self._branch_root(node)
        preview = safe_line(self.node_text(branch).strip())[:40]

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            self._set_meta(branch, hidden=True)
            parent = branch.parent
            assert parent is not None
            others = [c for c in parent.children if c is not branch and not is_hidden(c)]
            self.when_idle(lambda: self._enter(others[-1]) if others else self.show_node(parent))
            self.notify("Branch archived: 'Show hidden branches' brings it back", timeout=4)

        self.push_screen(
            ConfirmScreen(
                f"Archive the branch {preview!r} and everything below it?", yes="Archive"
            ),
            confirmed,
        )

    def action_unhide_branch(self) -> None:
        node = self._caret_node() or self.doc.node
        while node is not None and not is_hidden(node):
            node = node.parent
        if node is None:
            self.notify("This branch is not archived", timeout=2)
            return
        self._set_meta(node, hidden=None)
        self.notify("Branch restored", timeout=2)

    def action_refresh_exact(self) -> None:
        node = self.doc.node
        if node is None:
            return
        loom = self.loom

        def job() -> None:
            self.post_message(Moved(loom.refresh(node)))

        self.when_idle(lambda: self.submit("refresh", job, lock=True))

    # -- chat --------------------------------------------------------------------------
    def action_new_chat(self) -> None:
        if not chat.has_template(self.loom.tokenizer):
            self.notify("This model has no chat template", severity="warning")
            return

        def chosen(request: ChatRequest | None) -> None:
            if request is not None:
                self.when_idle(lambda: self._start_chat(request), stop=True)

        self.push_screen(ChatScreen(), chosen)

    def _start_chat(self, request: ChatRequest) -> None:
        """Turns through the chat template, in this session if it is empty, else in a
        new one on the same model."""
        old = self.loom
        in_new_session = bool(old.root.children)

        def job() -> None:
            turns = chat.opening_turns(old.tokenizer, request.system, request.user)
            loom, name = ops.new_session_like(old, request.name) if in_new_session else (old, "")
            node = loom.root
            for role, text in turns:
                meta = {"role": role} if role else {}
                node = loom.append(node, text, **meta)
            if loom is old:
                self.post_message(Moved(node, then_generate=request.generate))
            else:
                self.post_message(SessionSwitched(loom, name, node, request.generate))

        self.submit("chat", job, lock=True)

    def on_session_switched(self, message: SessionSwitched) -> None:
        """Put the new session in place of the old one (which is saved and closed)."""
        from loomterm.session import close_session

        old, new = self.loom, message.loom
        old.unsubscribe(self._on_loom_event)
        close_session(old)
        self.loom = new  # type: ignore[assignment]
        self.session_name = message.name or self.session_name
        new.subscribe(self._on_loom_event)  # type: ignore[attr-defined]
        self.doc = self._new_document(new)  # type: ignore[arg-type]
        self.view.doc = self.doc
        self.history = History()
        self._last_seen.clear()
        self._text_cache.clear()
        self._rebuild_tree()
        self.on_moved(Moved(message.node, then_generate=message.then_generate))

    def action_add_turn(self) -> None:
        if not chat.has_template(self.loom.tokenizer):
            self.notify("This model has no chat template", severity="warning")
            return

        def chosen(request: TurnRequest | None) -> None:
            if request is not None:
                self.when_idle(lambda: self._add_turn(request), stop=True)

        self.push_screen(TurnScreen(), chosen)

    def _add_turn(self, request: TurnRequest) -> None:
        loom = self.loom
        base = self.doc.node or loom.root
        document = self.doc.text

        def job() -> None:
            node = base
            for role, text in chat.next_turns(loom.tokenizer, document, request.text):
                meta = {"role": role} if role else {}
                node = loom.append(node, text, **meta)
            self.post_message(Moved(node, then_generate=request.generate))

        self.submit("turn", job, lock=True)

    # -- quitting ----------------------------------------------------------------------
    async def action_quit(self) -> None:
        """Stop generating, hand the last typing to the engine, then leave."""
        if self._quitting:
            return
        self._quitting = True
        self._cancel.set()
        self.when_idle(self._finish)

    def _finish(self) -> None:
        self._jobs.put(None)
        self.exit()


def run_app(loom: Loom, session_name: str = "") -> None:
    """Run the editor on ``loom`` until the user quits."""
    LoomApp(loom, session_name=session_name).run()


__all__ = ["LoomApp", "run_app"]
