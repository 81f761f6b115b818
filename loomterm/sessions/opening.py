"""Opening a session in two halves: the file at once, the model in the background.

The editor paints a session before torch is even imported: :class:`SessionOpening`
reads (and locks) the session file with the store alone, and :class:`PreviewLoom` shows
its tree, text (from the stored per-token pieces), settings and models the way a Loom
would. :meth:`SessionOpening.finish` is the heavy half: it loads the model, builds the
real Loom over *that same tree* (so every node the editor holds stays valid) and records
it in the file, reporting progress; the editor runs it on its engine worker.

Standard library and the store only: no torch, no textual.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from loomterm.config.settings import EngineOptions, Settings
from loomterm.errors import LoomError
from loomterm.store.data import Typed
from loomterm.tree import Tree

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.progress import ProgressCallback
    from loomterm.sessions.session import OpenedFile
    from loomterm.tree import Node

LOADING = "model loading\u2026"


class ModelLoading(LoomError):
    """Work that needs the model was asked for before it finished loading."""


class LoadAbandoned(LoomError):
    """The editor quit (or went elsewhere) while the model loaded: the load was left."""

    def __init__(self) -> None:
        super().__init__("the model's load was abandoned")


@dataclass(frozen=True)
class PreviewMemory:
    """What ``kv_bytes`` gives before the model is there: no KV."""

    nodes: int = 0
    working: int = 0
    total: int = 0


class PreviewRunner:
    """Stands for the runner in the status bar while the model loads."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.where = "loading"

    def __getattr__(self, name: str) -> Any:
        raise ModelLoading(f"{LOADING} ({name} needs it)")


class PreviewLoom:
    """A saved tree shown as a Loom shows it, with no model: reading only.

    What the editor reads to paint and to take typing (the tree, the cursor, the
    settings, the text of tokens, the model table) is here; anything that needs the
    model raises :class:`ModelLoading`, which the editor never lets happen (it holds
    such work until the real Loom arrives).
    """

    def __init__(
        self,
        tree: Tree,
        codec: Any,
        name: str,
        settings: Settings,
        cursor: Node | None = None,
        models: dict[str, dict[str, Any]] | None = None,
        active: str = "",
    ) -> None:
        self.tree = tree
        self.codec = codec
        self.settings = settings
        self.cursor = cursor if cursor is not None else tree.root
        self.runner = PreviewRunner(name)
        self.model_table = dict(models or {})
        self.active_model = active
        self.models: dict[str, Any] = {}
        self.model_notes: dict[str, str] = {}
        self.progress: ProgressCallback | None = None
        self.interrupt: Any = None

    @property
    def root(self) -> Node:
        return self.tree.root

    def kv_bytes(self) -> PreviewMemory:
        return PreviewMemory()

    def decode(self, tokens: list[int]) -> str:
        return self.codec.decode(list(tokens))

    def text(self, node: Node) -> str:
        return self.decode(node.path_tokens())

    def tokens(self, node: Node) -> list[int]:
        return node.path_tokens()

    def subscribe(self, listener: Callable[..., None]) -> None:
        """Nothing changes a preview: there is nothing to hear."""

    def unsubscribe(self, listener: Callable[..., None]) -> None:
        """See :meth:`subscribe`."""

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        yield

    def __getattr__(self, name: str) -> Any:
        raise ModelLoading(f"{LOADING} ({name} needs it)")


def import_engine(progress: ProgressCallback | None = None) -> None:
    """Import the engine (torch and transformers: seconds, the longest silent wait of a
    start otherwise) as an ``import`` stage on ``progress``; once per process."""
    import sys

    if "loomterm.engine.loom.facade" in sys.modules:
        return
    from loomterm.progress import Progress

    with Progress(progress).timed("import"):
        from loomterm.engine.loom import facade  # noqa: F401


def check_server(model: str | None) -> None:
    """With a server's URL for ``model``: say at once, before torch is imported, when
    nothing listens there (the one line connecting would give); nothing otherwise."""
    from loomterm.engine.remote import is_server_url

    if is_server_url(model):
        from loomterm.engine.remote.http import check_reachable

        check_reachable(str(model))


def model_label(model: str | None) -> str:
    """The name the status bar gives a model value before it is loaded."""
    from loomterm.engine.models.source import DEFAULT_MODEL_NAME

    if not model:
        return DEFAULT_MODEL_NAME
    text = str(model).rstrip("/")
    if "://" in text:
        return text.split("://", 1)[1]
    name = Path(text).name
    return name.removesuffix(".gguf") if name.lower().endswith(".gguf") else name


def folder_generation_config(model: str | None) -> SimpleNamespace | None:
    """A local model folder's ``generation_config.json`` read as attributes (as
    transformers' ``GenerationConfig`` gives them), without importing transformers; None
    for anything else (the default model, a file, a server) or a file that cannot be
    read."""
    if not model or "://" in model:
        return None
    path = Path(model).expanduser() / "generation_config.json"
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return SimpleNamespace(**values) if isinstance(values, dict) else None


class SessionOpening:
    """A session being opened: read now (:meth:`preview`), loaded later (:meth:`finish`).

    ``opened`` is the file already read (None: a new session, written to ``path`` once
    the model is there); ``prepare(loom)`` runs on a new session's Loom before it is
    first saved (the editor's starting samplers); ``attach(loom, progress)`` attaches
    the ``--attach`` models.
    """

    def __init__(
        self,
        path: Path,
        options: EngineOptions,
        opened: OpenedFile | None = None,
        read_only: bool = False,
        prepare: Callable[[Loom], None] | None = None,
        attach: Callable[[Loom, ProgressCallback], None] | None = None,
    ) -> None:
        self.path = path
        self.options = options
        self.opened = opened
        self.read_only = read_only
        self.prepare = prepare
        self.attach = attach
        self.loom: Loom | None = None
        self._preview: PreviewLoom | None = None
        self.reserved = False  # the file was made before the model came (``reserve``)
        self._abandoned = threading.Event()
        self._commit = threading.Lock()  # the Loom handed over, or the load abandoned
        self._thread: threading.Thread | None = None
        self._typed_lock = threading.Lock()
        self._journal: Any = None  # where typing goes when the file refuses it
        self._refused: LoomError | None = None  # why it did
        self._typed: Typed | None = opened.data.typed if opened is not None else None

    @property
    def new(self) -> bool:
        return self.opened is None or self.reserved

    # -- before the model: the file, and what is typed meanwhile ----------------------
    def reserve(self) -> None:
        """Make a new session's file now, before its model is there, so that what is
        typed while it loads is saved (:meth:`record_typed`) whatever happens to the
        load: a kill, a model that fails, a server that never answers. The file names
        the model it waits for (``provisional``: no fingerprint, no token); the first
        model to open it binds it (``Session.open``). A read-only start or a session
        that exists is left as it is. Raises ``SessionError`` when the file cannot be
        made (a read-only or full disk): said before anything is typed."""
        if self.opened is not None or self.read_only:
            return
        from loomterm.engine.models.source import DEFAULT_MODEL_NAME
        from loomterm.sessions.session import OpenedFile
        from loomterm.store import SessionStore

        preview = self.preview()
        record: dict[str, Any] = {
            "name": preview.runner.name,
            "source": self.options.model or DEFAULT_MODEL_NAME,
            "provisional": True,
        }
        if self.options.backend == "llama.cpp":
            record["backend"] = "llama.cpp"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        store = SessionStore.create(self.path, model=record, settings=preview.settings.as_dict())
        try:
            store.write_tree(preview.tree, lambda node: [], preview.tree.root)
            data = store.read()
        except BaseException:
            store.close()
            self.path.unlink(missing_ok=True)
            raise
        data.tree = preview.tree  # the very tree the editor shows (same ids)
        self.opened = OpenedFile(self.path, store, data)
        self.reserved = True

    def record_typed(self, node: int, text: str) -> None:
        """Keep ``text`` (the document, built on node ``node``'s path), typed before the
        model could read it, in the session file; raises ``LoomError`` when it cannot be
        written. Nothing for a read-only session."""
        from loomterm.sessions.session import session_of

        typed = Typed(node, text)
        with self._typed_lock:
            session = session_of(self.loom) if self.loom is not None else None
            if session is not None:
                session.recorder.keep_typed(typed)
                if session.recorder.error is not None:
                    raise session.recorder.error
            elif self.opened is not None and self.opened.store is not None:
                if typed != self._typed:
                    self._typed = typed
                    self._write_typed(self.opened.store, typed)
            self._typed = typed

    def _write_typed(self, store: Any, typed: Typed) -> None:
        """Into the file, else into the session's journal (replayed when it is next
        opened); raises the file's error either way, for the editor to show."""
        from loomterm.store.journal import Journal

        try:
            store.set_typed(typed)
        except LoomError as exc:
            if self._journal is None:
                self._journal = Journal(self.path)
            self._refused = exc
            try:
                where = self._journal.write("set", {"typed": typed.as_json()})
            except OSError:
                raise exc from None
            raise LoomError(f"{exc}; the typing is kept in {where}") from None

    @property
    def typed(self) -> Typed | None:
        """What the file keeps of the text typed before the model read it."""
        return self._typed

    # -- the load, which may be abandoned ---------------------------------------------
    def abandon(self) -> None:
        """Leave the load (the editor quits): :meth:`finish_in_background` returns at
        once, a load still running stops at its next progress report, and one that
        ends anyway closes its session instead of handing it over."""
        with self._commit:
            self._abandoned.set()

    @property
    def still_loading(self) -> bool:
        """A load left by :meth:`abandon` is still running on its thread."""
        return self._thread is not None and self._thread.is_alive()

    def finish_in_background(self, progress: ProgressCallback | None = None) -> Loom:
        """:meth:`finish` on a daemon thread, waited for here: raises
        :class:`LoadAbandoned` within 50 ms of :meth:`abandon`, however long the load
        itself takes to notice (a server that never answers, a long conversion, which
        writes to a temporary folder and renames it, so leaving it harms no cache)."""
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                outcome["loom"] = self.finish(progress)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = exc
            finally:
                done.set()

        self._thread = threading.Thread(target=run, name="loomterm-load", daemon=True)
        self._thread.start()
        while not done.wait(0.05):
            if self._abandoned.is_set():
                raise LoadAbandoned()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["loom"]

    def _checked(self, progress: ProgressCallback | None) -> ProgressCallback:
        """``progress``, stopping the load at its next report once it is abandoned."""

        def report(stage: str, done: int, total: int | None) -> None:
            if self._abandoned.is_set():
                raise LoadAbandoned()
            if progress is not None:
                progress(stage, done, total)

        return report

    def preview(self) -> PreviewLoom:
        """The tree to show now (made once)."""
        if self._preview is None:
            self._preview = self._make_preview()
        return self._preview

    def _make_preview(self) -> PreviewLoom:
        from loomterm.engine.remote.tokens import StoredTokenText

        if self.opened is None:
            label = model_label(self.options.model)
            return PreviewLoom(Tree(), StoredTokenText({}), label, self._starting_settings())
        data = self.opened.data
        codec = StoredTokenText.from_tree(data.tree.root.walk(), data.pieces)
        settings, _notes = Settings.from_stored(data.settings)  # warned of when loaded
        name = model_label(self.options.model) if self.options.model else ""
        name = name or str(data.model.get("name") or model_label(data.model.get("source")))
        state = data.model_state or {}
        active = str(state.get("active") or next(iter(data.models), ""))
        preview = PreviewLoom(
            data.tree, codec, name, settings, data.cursor_node, data.models, active
        )
        # The models the file says were attached: shown as attached (they are coming
        # back), not as only recorded; a key stands for its runner until then.
        attached = state.get("attached") or list(data.models)
        preview.models = {key: None for key in attached if key in data.models}
        return preview

    def _starting_settings(self) -> Settings:
        """What a new session's status bar shows before the model is there: the samplers
        it will start from (the llama.cpp preset, then a local model folder's
        ``generation_config.json``), not neutral ones that change once it has loaded."""
        from loomterm.config.presets import starting_samplers

        return starting_samplers(Settings(), folder_generation_config(self.options.model))

    def finish(self, progress: ProgressCallback | None = None) -> Loom:
        """Load the model and make the real Loom over the previewed tree (heavy: run it
        off the UI thread). Raises what opening raises (``LoomError``)."""
        from loomterm.sessions.session import close_session

        progress = self._checked(progress)
        import_engine(progress)
        if self.opened is None:
            loom = self._create(progress)
        else:
            from loomterm.sessions.session import Session

            session = Session.open(
                self.opened.path,
                **self.options.load_kwargs(),
                progress=progress,
                read_only=self.read_only,
                reattach=True,
                opened=self.opened,
            )
            loom = session.loom
            with self._typed_lock:
                self.opened = None  # the Session owns the file now
                session.recorder.typed = self._typed  # what was typed while it loaded
                if self._journal is not None and self._refused is not None:
                    # The file refused the typing: the recorder writes it all when it can.
                    session.recorder.carry_on_failing(self._journal, self._refused)
            try:
                if self.reserved and self.prepare is not None:
                    self.prepare(loom)  # a new session's starting samplers
                    session.recorder("settings", None)
                if self.attach is not None:
                    self.attach(loom, progress)
            except BaseException:
                close_session(loom)
                raise
        with self._commit, self._typed_lock:
            if self._abandoned.is_set():
                close_session(loom)
                raise LoadAbandoned()
            self.loom = loom
        return loom

    def _create(self, progress: ProgressCallback | None) -> Loom:
        from loomterm.engine import Loom
        from loomterm.engine.open import RunnerOptions, open_runner
        from loomterm.sessions.session import save_loom

        options = self.options
        tree = self.preview().tree
        # The one road from a model to a runner (``engine.open``), every option with it.
        runner = open_runner(options.model, RunnerOptions.of(**options.load_kwargs()), progress)
        loom = Loom(runner, tree=tree)
        if self.prepare is not None:
            self.prepare(loom)
        if self.attach is not None:
            self.attach(loom, progress)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_loom(loom, self.path)
        return loom

    @property
    def unused(self) -> bool:
        """A file made by :meth:`reserve` that the model never came to and nothing was
        typed into: nothing to keep (the caller deletes it, as an empty session)."""
        typed = self._typed
        return self.reserved and self.loom is None and (typed is None or not typed.text)

    def close(self) -> None:
        """Give the file back if the model never came (the editor quit first, or the
        load failed)."""
        if self.opened is not None:
            self.opened.close()
            self.opened = None
