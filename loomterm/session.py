"""Sessions: a live :class:`~loomterm.engine.Loom` and the file it is recorded in.

- :class:`Session` wraps a Loom from outside: ``Session.create`` writes the whole tree
  and attaches a :class:`~loomterm.recorder.SessionRecorder` that streams every later
  change into the file; ``Session.open`` rebuilds the tree from a file on the same
  model (checked by fingerprint; a different model is refused unless the caller asks
  to open read-only or to re-tokenize the text); ``close`` flushes and, with the
  ``kv_snapshot`` setting, writes a KV snapshot (``loomterm.kv_snapshot``).
- :func:`resolve_session` / :func:`list_sessions`: names under ``sessions_dir()``.
- :func:`import_session`: other looms' trees and loomterm JSON as new sessions.

The engine is imported lazily: resolving names and listing sessions stay light.
"""

from __future__ import annotations

import difflib
import os
import shutil
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm import store as store_mod
from loomterm.engine.text import PieceMaker
from loomterm.errors import SessionError
from loomterm.kv_snapshot import load_kv_snapshot, save_kv_snapshot, snapshot_path
from loomterm.locations import sessions_dir
from loomterm.model_identity import mismatch_error, model_record, same_model
from loomterm.recorder import FLUSH_INTERVAL, SessionRecorder, alternative_ids
from loomterm.store import (
    SESSION_SUFFIX,
    Caret,
    ModelMismatchError,
    SessionData,
    SessionStore,
    SessionSummary,
    Typed,
    hoisted,
)

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.engine.models.load import LoadedModel
    from loomterm.tree import Node


# -- names ----------------------------------------------------------------------------


def session_path(name_or_path: str | os.PathLike) -> Path:
    """Where a session name or path points (it need not exist yet).

    Anything that looks like a path (has a folder separator, ends in ``.loom``, or is
    an existing file) is a path; anything else is a name under ``sessions_dir()``.
    """
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    separators = [sep for sep in (os.sep, os.altsep) if sep]
    if path.suffix == SESSION_SUFFIX or any(sep in text for sep in separators) or path.is_file():
        return path
    if not text or text.startswith("."):
        raise SessionError(f"{text!r} is not a usable session name")
    return sessions_dir() / f"{text}{SESSION_SUFFIX}"


def resolve_session(name_or_path: str | os.PathLike) -> Path:
    """The file of an existing session, or :class:`SessionError` listing close names."""
    path = session_path(name_or_path)
    if path.is_file():
        return path
    wanted = path.name.removesuffix(SESSION_SUFFIX)
    names = sorted(p.name.removesuffix(SESSION_SUFFIX) for p in _session_files())
    close = difflib.get_close_matches(wanted, names, n=5, cutoff=0.5)
    if close:
        hint = "close matches: " + ", ".join(close)
    elif names:
        hint = f"{len(names)} session(s) exist; see 'loomterm sessions'"
    else:
        hint = f"no sessions saved yet in {sessions_dir()}"
    raise SessionError(f"no session named {wanted!r} ({hint})")


def _session_files() -> list[Path]:
    return [p for p in sessions_dir().glob(f"*{SESSION_SUFFIX}") if p.is_file()]


def list_sessions() -> list[SessionSummary]:
    """Every session under ``sessions_dir()``, newest change first. Damaged files are
    listed with their ``error`` set rather than hidden."""
    summaries = [store_mod.summarize(path) for path in _session_files()]
    return sorted(summaries, key=lambda s: s.modified, reverse=True)


_sessions: weakref.WeakKeyDictionary[Loom, Session] = weakref.WeakKeyDictionary()


def session_of(loom: Loom) -> Session | None:
    """The session ``loom`` is recorded in (made by :class:`Session`), if any."""
    return _sessions.get(loom)


def saved_caret(loom: Loom, node: Node) -> int | None:
    """Where the caret was left in ``node``'s path in ``loom``'s session (see
    :meth:`Session.caret_at`); None without a session or a caret recorded there."""
    session = session_of(loom)
    return session.caret_at(node) if session is not None else None


def record_caret(loom: Loom, node: Node, char: int | None) -> None:
    """Record the editor's caret in ``loom``'s session, if it has one (see
    :meth:`Session.record_caret`)."""
    session = session_of(loom)
    if session is not None and not session.closed:
        session.record_caret(node, char)


def saved_export_folder(loom: Loom) -> str | None:
    """The folder the export dialog last wrote to for ``loom``'s session (kept in the
    session file), or None without a session or an export yet."""
    session = session_of(loom)
    store = session.recorder.store if session is not None and not session.closed else None
    folder = store.view("export_folder") if store is not None else None
    return folder if isinstance(folder, str) and folder else None


def record_export_folder(loom: Loom, folder: str) -> None:
    """Keep ``folder`` as the export dialog's folder for ``loom``'s session (not a
    change of content; a session opened read-only, or a failed write, keeps none)."""
    session = session_of(loom)
    store = session.recorder.store if session is not None and not session.closed else None
    if store is None or store.closed:
        return
    try:
        store.set_view("export_folder", folder)
    except SessionError:  # a convenience: the export itself is written
        pass


def saved_hoist(loom: Loom) -> int | None:
    """The id of the node the editor was hoisted at in ``loom``'s session (the
    ``hoist`` key, ``loomterm.store.hoisted``), or None: not hoisted, no session, or a
    value that names no node of the tree."""
    session = session_of(loom)
    store = session.recorder.store if session is not None and not session.closed else None
    if store is None or store.closed:
        return None
    node = hoisted(store.view("hoist"))
    return node if node is not None and node in loom.tree.nodes else None


def record_hoist(loom: Loom, node: int | None) -> None:
    """Keep the hoist (a node id, None for the whole tree) in ``loom``'s session: a
    view, not a change of content (a read-only session, or a failed write, keeps none)."""
    session = session_of(loom)
    store = session.recorder.store if session is not None and not session.closed else None
    if store is None or store.closed:
        return
    try:
        store.set_view("hoist", None if node is None else {"node": node})
    except SessionError:  # a convenience: the hoist still holds in this run
        pass


def typed_before_load(loom: Loom) -> Typed | None:
    """Text typed into ``loom``'s session before its model read it (the editor puts it
    back on the screen), if its file keeps any."""
    session = session_of(loom)
    return session.recorder.typed if session is not None else None


def typed_read(loom: Loom) -> None:
    """The model has read the typed text into the tree: the file need not keep it."""
    session = session_of(loom)
    if session is not None and session.recorder.typed is not None:
        session.recorder.keep_typed(None)


def close_session(loom: Loom) -> None:
    """Detach ``loom`` from its file: flush, snapshot if asked, release the lock."""
    session = session_of(loom)
    if session is not None:
        session.close()


# -- the session ----------------------------------------------------------------------


class Session:
    """A Loom recorded in a session file.

    The engine knows nothing of files: a Session wraps a Loom from outside, listens to
    its changes (``SessionRecorder``) and owns saving, opening, closing and the KV
    snapshot. ``session_of(loom)`` finds the session of a loom.

    Attributes:
        loom: The live loom.
        recorder: What writes its changes to the file.
    """

    def __init__(self, loom: Loom, recorder: SessionRecorder) -> None:
        self.loom = loom
        self.recorder = recorder
        loom.subscribe(recorder)
        _sessions[loom] = self

    @property
    def path(self) -> Path:
        return self.recorder.path

    @property
    def name(self) -> str:
        return self.path.name.removesuffix(SESSION_SUFFIX)

    @property
    def read_only(self) -> bool:
        return self.recorder.read_only

    @property
    def closed(self) -> bool:
        return self.recorder.closed

    def flush(self) -> None:
        """Write buffered tokens now; raise the error that stopped saving, if any."""
        self.recorder.flush()

    def caret_at(self, node: Node) -> int | None:
        """Where the caret was left in ``node``'s path (a character offset into its
        text, not yet clamped to it), when it was recorded there; None otherwise, or
        when it was at the end (``loomterm.store.Caret``)."""
        caret = self.recorder.caret
        return caret.char if caret is not None and caret.node == node.id else None

    def record_caret(self, node: Node, char: int | None) -> None:
        """The editor's caret settled at ``char`` in ``node``'s path (None: at its end);
        written at once unless the file has it already (the editor debounces)."""
        self.recorder.record_caret(Caret(node.id, None if char is None else max(0, char)))

    def close(self) -> None:
        """Flush, write the KV snapshot if asked for (``kv_snapshot``), release the file."""
        self.recorder.close()

    def save_snapshot(self) -> Path:
        """Write the cursor path's KV beside the file now (``loomterm.kv_snapshot``)."""
        return save_kv_snapshot(self.loom, self.path)

    @classmethod
    def create(cls, loom: Loom, path: str | os.PathLike, kv_snapshot: bool = False) -> Session:
        """Write ``loom``'s whole session to ``path`` and keep it in step from then on.

        Saving to the file the loom is already recorded in only flushes. Saving
        elsewhere ("save as") detaches from the old file. An existing session at
        ``path`` is replaced; a file that is not a loomterm session is refused.
        """
        path = session_path(path)
        current = session_of(loom)
        if current is not None and not current.closed and not current.read_only:
            if current.path.resolve() == path.resolve():
                current.flush()
                if kv_snapshot:
                    current.recorder.kv_snapshot = True
                    save_kv_snapshot(loom, path)
                return current
        with loom.exclusive():
            existed = path.exists()
            store = SessionStore.create(
                path, model=model_record(loom), settings=loom.settings.as_dict(), overwrite=True
            )
            try:
                pieces = PieceMaker(loom.codec)
                store.write_tree(loom.tree, pieces.node_pieces, loom.cursor)
                store.set_models(loom.model_table, loom.model_state)
                store.add_vocab(
                    {t: pieces.piece(t) for t in alternative_ids(list(loom.tree.nodes.values()))}
                )
                if len(loom.contexts.versions):
                    store.set_contexts(loom.contexts.versions.as_dict())
            except BaseException:
                store.close()
                if not existed:  # a file without its tree would only block the name
                    for leftover in (path, *(path.with_name(path.name + s) for s in SIDES)):
                        leftover.unlink(missing_ok=True)
                raise
            if current is not None:
                # The old file is let go only now that this one holds everything; it may
                # be the one that cannot be written (saving elsewhere): its journal stays.
                current.recorder.close(quiet=True)
            session = cls(loom, SessionRecorder(loom, store, path, pieces, kv_snapshot))
        if kv_snapshot:
            save_kv_snapshot(loom, path)
        return session

    @classmethod
    def open(
        cls, path: str | os.PathLike, options: OpenOptions | None = None, **changes: Any
    ) -> Session:
        """Open a saved session on a live Loom. ``options`` (an :class:`OpenOptions`)
        say how; keyword arguments set its fields one by one
        (``Session.open(path, model=..., read_only=True)``).

        Raises:
            SessionError: missing, damaged, newer-schema or locked file.
            ModelMismatchError: the model is not the session's and neither
                ``read_only`` nor ``retokenize`` was asked for.
        """
        how = replace(options or OpenOptions(), **changes)
        opened = how.opened or read_file(path, how.read_only)
        path, store, data = opened.path, opened.store, opened.data
        try:
            loaded, remote = _model_for(data, path, how)
            # A session made while its model loaded holds no token yet: it is this model's.
            bind = is_provisional(data)
            matches = bind or same_model(data.model.get("fingerprint"), loaded.fingerprint)
            if not matches and not (how.retokenize or how.read_only):
                raise mismatch_error(data.name, data.model, loaded)
            if remote:
                pieces = PieceMaker(loaded.codec)
            else:
                pieces = PieceMaker.for_tokenizer(loaded.tokenizer)
            if not matches:
                data = _retokenize_file(data, loaded, pieces, store, path)
            loom = _loom_for(data, loaded, remote, how, path)
            check_vocabulary(data, loom.runner.vocab_size, path)
            if bind and store is not None:
                store.write_tree(
                    data.tree, pieces.node_pieces, data.cursor_node, model_record(loom)
                )
            restored = matches and _restore_kv(loom, path, how.kv_snapshot)
            if how.reattach:
                from loomterm.session_models import reattach_models

                reattach_models(
                    loom, data, how.progress, how.on_note, how.loaded_models, path.name,
                    threads=how.threads,
                )  # fmt: skip
        except BaseException:
            if store is not None:
                store.close()
            raise
        kv_snapshot = bool(how.kv_snapshot) or restored
        recorder = SessionRecorder(
            loom, store, path, pieces, kv_snapshot, caret=data.caret, typed=data.typed
        )
        session = cls(loom, recorder)
        state_changed = how.reattach and loom.model_state != data.model_state
        if store is not None and (loom.model_table != data.models or state_changed):
            store.set_models(loom.model_table, loom.model_state if how.reattach else None)
        _settle_approx(loom, recorder)
        return session


def check_vocabulary(data: SessionData, vocab_size: int, path: Path) -> None:
    """Every token id in the tree lies in the model's vocabulary: a file that names the
    model's fingerprint but holds other ids (edited, or imported) would otherwise stop
    the model at its first read of them."""
    for node in data.tree.nodes.values():
        alternatives = (t for top in node.top if top for t, _ in top)
        for token in (*node.tokens, *alternatives):
            if not 0 <= token < vocab_size:
                raise SessionError(
                    f"{path} holds token id {token} (node {node.id}), outside its model's "
                    f"vocabulary of {vocab_size}"
                )


@dataclass(frozen=True)
class OpenOptions:
    """How :meth:`Session.open` opens a session.

    Attributes:
        model: The model to use; None means the one the session was made with.
        device, dtype, quant, n_ctx, kv_budget: How to load a local model and size
            its cache (the engine options of the same names).
        progress: ``progress(stage, done, total)`` while loading and prefilling.
        read_only: Do not lock the file or write to it; changes stay in memory.
        retokenize: If ``model`` differs from the session's, re-tokenize every node's
            text with it (the old file is kept as ``<file>.<time>.bak``; logprobs and
            alternatives, which belonged to the old model, are dropped). With
            ``read_only`` a different model gets a re-tokenized copy in memory.
        kv_snapshot: Use (and on close, refresh) a KV snapshot beside the file.
            None: use one if present.
        server_kind, server_model: For a session on a server (its model source is a
            URL): override the kind and model it recorded.
        backend, threads: As ``Loom.load``; ``"auto"`` reopens a session made on
            llama.cpp (``--backend llama.cpp``) on llama.cpp again.
        loaded: A model already loaded (the editor's, to switch sessions in place):
            used instead of loading or connecting to ``model``; checked against the
            session's like any other.
        reattach: Attach again the other models the session had attached and make the
            one that was active active again (``session_models``); one that cannot come
            back is a one-line note (``on_note``, default a warning) and stays
            recorded. ``loaded_models``: local models already in memory that may serve
            instead of loading them again.
        opened: The file already read (and locked) by :func:`read_file`, whose tree the
            editor showed while this loads the model: the Loom adopts that very tree.
    """

    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    n_ctx: int | None = None
    kv_budget: int | str | None = None
    progress: Callable[..., None] | None = None
    read_only: bool = False
    retokenize: bool = False
    kv_snapshot: bool | None = None
    server_kind: str | None = None
    server_model: str | None = None
    loaded: LoadedModel | None = None
    quant: str | None = "none"
    reattach: bool = False
    loaded_models: Sequence[LoadedModel] = ()
    on_note: Callable[[str], None] | None = None
    backend: str = "auto"
    threads: int | None = None
    opened: OpenedFile | None = None


SIDES = ("-wal", "-shm")  # SQLite's files beside a session's


def save_elsewhere(loom: Loom, target: str | os.PathLike) -> Path:
    """Write ``loom``'s whole session to ``target`` (a session name or a path; nothing
    may be there yet), which records it from then on: the way out when its own file
    cannot be written (the old file keeps its journal, replayed when it is next
    opened). Raises ``SessionError`` with the reason when ``target`` cannot be written
    either; the session goes on as it was."""
    path = session_path(target)
    if path.exists():
        raise SessionError(f"{path} exists already: choose another name or path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SessionError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        Session.create(loom, path)
    except OSError as exc:
        raise SessionError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def is_provisional(data: SessionData) -> bool:
    """A session file made before its model was there (``SessionOpening.reserve``): its
    model record names a source but no fingerprint, and no token is in the tree yet."""
    return bool(data.model.get("provisional")) and not any(
        node.tokens for node in data.tree.nodes.values()
    )


def _model_for(data: SessionData, path: Path, how: OpenOptions) -> tuple[Any, bool]:
    """The model to open ``data`` on (loaded, connected or the caller's), and whether
    it is a runner already (a server, llama.cpp): the Loom is then made on it as it is."""
    from loomterm.engine.models.load import LoadedModel
    from loomterm.engine.remote import is_server_url

    if how.loaded is not None:
        return how.loaded, False  # the caller's model, checked against the session's
    source = how.model or data.model.get("source")
    if not source:
        raise SessionError(f"session {path.name} records no model: pass one with --model")
    if is_server_url(source):
        overrides = {"kind": how.server_kind, "model_arg": how.server_model}
        named_by = "user" if how.model else "file"  # a file's URL gets no key unasked
        return _connect_server(data, source, how.read_only, overrides, named_by), True
    from loomterm.engine.open import load

    # ``auto`` keeps the backend the session ran on for its own model (a record without
    # one ran on torch); another model takes ``auto``'s own choice.
    own = how.model is None or _same_source(how.model, data.model.get("source"))
    recorded = str(data.model.get("backend") or "torch") if own else None
    model = load(source, _runner_options(how), how.progress, recorded)
    return model, not isinstance(model, LoadedModel)


def _same_source(given: str, recorded: Any) -> bool:
    """Whether the model value ``given`` names the recorded source (a path resolved)."""
    if not isinstance(recorded, str):
        return False
    if given == recorded:
        return True
    try:
        return Path(given).expanduser().resolve() == Path(recorded).expanduser().resolve()
    except (OSError, ValueError):
        return False


def _runner_options(how: OpenOptions):
    """``how``'s engine options as ``engine.open.RunnerOptions``."""
    from loomterm.engine.open import RunnerOptions

    return RunnerOptions(
        backend=how.backend,
        threads=how.threads,
        device=how.device,
        dtype=how.dtype,
        quant=how.quant,
        n_ctx=how.n_ctx,
        kv_budget=how.kv_budget,
    )


def _retokenize_file(
    data: SessionData, loaded: Any, pieces: PieceMaker, store: SessionStore | None, path: Path
) -> SessionData:
    """``data`` re-tokenized for ``loaded``; a writable file is backed up, then
    rewritten with the new tree."""
    data = retokenized(data, loaded, pieces)
    if store is not None:
        backup = path.with_name(f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
        shutil.copy2(path, backup)
        store.write_tree(data.tree, lambda n: data.pieces[n.id], data.cursor_node, model=data.model)
    return data


def _loom_for(data: SessionData, loaded: Any, remote: bool, how: OpenOptions, path: Path) -> Loom:
    """A Loom over ``data``'s tree on ``loaded``, with the file's settings, context
    versions, models and cursor."""
    from loomterm.engine import Loom
    from loomterm.engine.open import runner_for
    from loomterm.settings import Settings

    loom = Loom(runner_for(loaded, _runner_options(how)), tree=data.tree)
    settings, notes = Settings.from_stored(data.settings)
    notes += loom.contexts.versions.load(data.contexts)
    for note in notes:
        warnings.warn(f"session {path.name}: {note}", stacklevel=3)
    loom.settings = settings
    # Who wrote what: keys stay those of the file.
    loom.adopt_models(data.models, data.model_state)
    loom.cursor = data.cursor_node
    if how.progress is not None:
        loom.progress = how.progress
    return loom


def _restore_kv(loom: Loom, path: Path, kv_snapshot: bool | None) -> bool:
    """Load the KV snapshot beside ``path`` when there is one and it may be used;
    whether it was."""
    snapshot = snapshot_path(path)
    if loom.capabilities.node_kv and kv_snapshot is not False and snapshot.exists():
        return load_kv_snapshot(loom, snapshot)
    return False


@dataclass
class OpenedFile:
    """A session file read without its model: its path, its store (locked; None when
    read-only) and what it holds."""

    path: Path
    store: SessionStore | None
    data: SessionData

    def close(self) -> None:
        """Give the file back (its lock) when no Session came to own it."""
        if self.store is not None:
            self.store.close()


def read_file(path: str | os.PathLike, read_only: bool = False) -> OpenedFile:
    """Read (and, unless ``read_only``, lock) a saved session: light, no model. The
    first half of :meth:`Session.open`, which takes it as ``opened``."""
    path = resolve_session(path)
    if read_only:
        return OpenedFile(path, None, store_mod.load(path))
    store = SessionStore.open(path)  # validates first, then locks
    try:
        return OpenedFile(path, store, store.read())
    except BaseException:
        store.close()
        raise


def _connect_server(
    data: SessionData,
    url: str,
    read_only: bool,
    overrides: dict[str, str | None],
    named_by: str = "file",
) -> Any:
    """The runner for a session on a server. Its recorded server options (kind, model,
    tokenizer) are reused when the URL is the recorded one, unless ``overrides`` says
    otherwise. Read-only, an unreachable server gives an offline runner that shows the
    stored text."""
    from loomterm.engine.remote import connect
    from loomterm.engine.remote.http import public_url
    from loomterm.engine.remote.runner import RemoteRunner
    from loomterm.errors import ServerError, ServerModelError

    record = (
        data.model if public_url(str(data.model.get("source") or "")) == public_url(url) else {}
    )
    server = dict(record.get("server") or {})
    server.update({key: value for key, value in overrides.items() if value})
    options = dict(
        server_kind=server.get("kind"),
        server_model=server.get("model_arg"),
        tokenizer=server.get("tokenizer_source"),
    )
    try:
        return connect(url, **options, named_by=named_by)
    except ServerModelError:
        raise
    except ServerError as exc:
        if not read_only:
            raise SessionError(
                f"{exc}; session {data.name!r} can still be read with --read-only"
            ) from None
        record = dict(record, source=url, server=server)
        return RemoteRunner.offline(record, _offline_codec(data, server), exc)


def _offline_codec(data: SessionData, server: dict[str, Any]) -> Any:
    """The recorded local tokenizer when it loads here, else the stored pieces' text."""
    from loomterm.engine.remote.tokens import StoredTokenText, load_tokenizer
    from loomterm.engine.text import TokenText
    from loomterm.errors import LoomError

    source = server.get("tokenizer_source")
    if source:
        try:
            return TokenText(load_tokenizer(source))
        except LoomError:
            pass
    return StoredTokenText.from_tree(data.tree.root.walk(), data.pieces)


def save_loom(loom: Loom, path: str | os.PathLike, kv_snapshot: bool = False) -> Session:
    """``Session.create``: write ``loom`` to ``path`` and keep recording it there."""
    return Session.create(loom, path, kv_snapshot=kv_snapshot)


def open_loom(path: str | os.PathLike, **options: Any) -> Loom:
    """``Session.open(...).loom``: the live Loom of a saved session (see Session.open)."""
    return Session.open(path, **options).loom


def load_session(name_or_path: str | os.PathLike) -> SessionData:
    """Read a session's tree and text without a model and without locking it."""
    return store_mod.load(resolve_session(name_or_path))


def _settle_approx(loom: Loom, recorder: SessionRecorder) -> None:
    """Nodes flagged approximate lost their re-rotated KV in the restart; their KV
    will be computed afresh, exactly, so the flag no longer holds."""
    for node in loom.tree.nodes.values():
        if node.approx and node.kv is None:
            node.approx = False
            recorder("update", node)


def retokenized(data: SessionData, loaded: LoadedModel, pieces: PieceMaker) -> SessionData:
    """``data`` with every node's text encoded by another model's tokenizer."""
    from loomterm.export import retokenize_tree, text_tree_of

    tree = retokenize_tree(text_tree_of(data), _encoder_of(loaded))
    return SessionData(
        tree=tree,
        pieces={node.id: pieces.node_pieces(node) for node in tree.root.walk()},
        cursor=data.cursor,
        settings=data.settings,
        contexts=data.contexts,
        model=model_record(loaded),
        vocab={},
        created=data.created,
        modified=data.modified,
        name=data.name,
        caret=data.caret,  # a character offset: the text, and so the place, is the same
    )


def _encoder_of(loaded: Any) -> Callable[[str, bool], list[int]]:
    """A loaded model's tokenizer, or a runner's ``encode`` (a server without one here)."""
    tokenizer = getattr(loaded, "tokenizer", None)
    if tokenizer is not None:
        return _encoder(tokenizer)
    return lambda text, at_start: loaded.encode(text, at_start) if text else []


def _encoder(tokenizer: Any) -> Callable[[str, bool], list[int]]:
    def encode(text: str, at_start: bool) -> list[int]:
        return list(tokenizer(text, add_special_tokens=at_start)["input_ids"]) if text else []

    return encode


# -- import ---------------------------------------------------------------------------


def import_session(
    source: SessionData | Any,
    target: str | os.PathLike,
    model: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    quant: str | None = "none",
) -> SessionData:
    """Write an imported tree (from :func:`loomterm.export.read_import`) as a new session.

    A loomterm tree with tokens is written as is, without loading any model, unless
    ``model`` names a different one (then its text is re-tokenized). A text-only tree
    is tokenized with ``model`` (None: the default model). A server the file names is
    never contacted here: its tree is written as is, and opening the session connects
    (asking before any key goes there, ``remote.credentials``).
    """
    from loomterm.engine.remote import is_server_url
    from loomterm.export import TextTree, retokenize_tree

    target = session_path(target)
    if target.exists():
        raise SessionError(f"a session already exists at {target}; choose another name")
    named = source_model(source)
    if (
        isinstance(source, SessionData)
        and model is None
        and (source.model.get("fingerprint") or is_server_url(named))
    ):
        data = source
    else:
        from loomterm.engine.models.load import load_model
        from loomterm.engine.remote import connect

        # A server named by the file is not contacted: the default model tokenizes.
        wanted = model or (None if is_server_url(named) else named)
        if is_server_url(wanted):
            loaded = connect(wanted)
            pieces = PieceMaker(loaded.codec)
        else:
            loaded = load_model(wanted, device=device, dtype=dtype, quant=quant)
            pieces = PieceMaker.for_tokenizer(loaded.tokenizer)
        if isinstance(source, SessionData) and same_model(
            source.model.get("fingerprint"), loaded.fingerprint
        ):
            data = source
        elif isinstance(source, SessionData):
            data = retokenized(source, loaded, pieces)
        else:
            assert isinstance(source, TextTree)
            tree = retokenize_tree(source, _encoder_of(loaded))
            data = SessionData(
                tree=tree,
                pieces={node.id: pieces.node_pieces(node) for node in tree.root.walk()},
                cursor=source.cursor,
                settings=imported_settings(source.settings, loaded),
                model=model_record(loaded),
                created=source.created_at,
                modified=time.time(),
                name=target.name.removesuffix(SESSION_SUFFIX),
            )
    store_mod.write_session(target, data).close()
    return store_mod.load(target)


def imported_settings(stored: dict[str, Any], loaded: Any) -> dict[str, Any]:
    """The settings of a tree imported from another loom: its own where it has any
    sampler, else the samplers a new session starts with (llama.cpp's, then the
    model's generation_config), not loomterm's neutral defaults."""
    from loomterm.presets import starting_samplers
    from loomterm.settings import Settings

    if any(Settings.SPECS[name].sampling for name in stored if name in Settings.SPECS):
        return stored
    config = getattr(getattr(loaded, "model", None), "generation_config", None)
    return starting_samplers(Settings.from_stored(stored)[0], config).as_dict()


def source_model(source: Any) -> str | None:
    """The model an imported tree names, if any (text-only trees name none)."""
    model = getattr(source, "model", None) or {}
    return model.get("source") if isinstance(model, dict) else None


__all__ = [
    "FLUSH_INTERVAL",
    "ModelMismatchError",
    "PieceMaker",
    "Session",
    "SessionRecorder",
    "close_session",
    "import_session",
    "list_sessions",
    "load_kv_snapshot",
    "load_session",
    "model_record",
    "open_loom",
    "record_caret",
    "record_export_folder",
    "record_hoist",
    "resolve_session",
    "retokenized",
    "same_model",
    "save_elsewhere",
    "saved_caret",
    "saved_export_folder",
    "saved_hoist",
    "save_kv_snapshot",
    "save_loom",
    "session_path",
    "snapshot_path",
]
