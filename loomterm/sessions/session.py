"""Sessions: a live :class:`~loomterm.engine.Loom` and the file it is recorded in.

- :class:`Session` wraps a Loom from outside: ``Session.create`` writes the whole tree
  and attaches a :class:`~loomterm.sessions.recorder.SessionRecorder` that streams every later
  change into the file; ``Session.open`` rebuilds the tree from a file on the same
  model (checked by fingerprint; a different model is refused unless the caller asks
  to open read-only or to re-tokenize the text); ``close`` flushes and, with the
  ``kv_snapshot`` setting, writes a KV snapshot (``loomterm.sessions.kv_snapshot``).
- :func:`resolve_session` / :func:`list_sessions`: names under ``sessions_dir()``
  (``loomterm.sessions.names``).
- :func:`import_session`: other looms' trees and loomterm JSON as new sessions
  (``loomterm.sessions.importing``).
- How a session is opened, its file read and its model loaded: ``loomterm.sessions.loading``.

The engine is imported lazily: resolving names and listing sessions stay light.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm import store as store_mod
from loomterm.engine.text import PieceMaker
from loomterm.errors import SessionError
from loomterm.sessions.identity import mismatch_error, model_record, same_model
from loomterm.sessions.importing import import_session, retokenized
from loomterm.sessions.keeping import alternative_ids
from loomterm.sessions.kv_snapshot import load_kv_snapshot, save_kv_snapshot, snapshot_path
from loomterm.sessions.loading import (
    OpenedFile,
    OpenOptions,
    loom_for,
    model_for,
    read_file,
    restore_kv,
    retokenize_file,
)
from loomterm.sessions.names import list_sessions, resolve_session, session_path
from loomterm.sessions.recorder import FLUSH_INTERVAL, SessionRecorder
from loomterm.store import (
    SESSION_SUFFIX,
    Caret,
    ModelMismatchError,
    SessionData,
    SessionStore,
    Typed,
    hoisted,
)

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.tree import Node


_sessions: weakref.WeakKeyDictionary[Loom, Session] = weakref.WeakKeyDictionary()


def session_of(loom: object) -> Session | None:
    """The session ``loom`` is recorded in (made by :class:`Session`), if any (none
    for the loading preview, or any other object)."""
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


def _view_store(loom: Loom) -> SessionStore | None:
    """The open store of ``loom``'s session, where the editor keeps its views (the
    export folder, the hoist), or None."""
    session = session_of(loom)
    store = session.recorder.store if session is not None and not session.closed else None
    return None if store is None or store.closed else store


def _set_view(loom: Loom, key: str, value: object) -> None:
    """Keep a view in ``loom``'s session: not a change of content (a read-only session,
    or a failed write, keeps none: a view is a convenience)."""
    store = _view_store(loom)
    if store is not None:
        try:
            store.set_view(key, value)
        except SessionError:
            pass


def saved_export_folder(loom: Loom) -> str | None:
    """The folder the export dialog last wrote to for ``loom``'s session (kept in the
    session file), or None without a session or an export yet."""
    store = _view_store(loom)
    folder = store.view("export_folder") if store is not None else None
    return folder if isinstance(folder, str) and folder else None


def record_export_folder(loom: Loom, folder: str) -> None:
    """Keep ``folder`` as the export dialog's folder for ``loom``'s session."""
    _set_view(loom, "export_folder", folder)


def saved_hoist(loom: Loom) -> int | None:
    """The id of the node the editor was hoisted at in ``loom``'s session (the
    ``hoist`` key, ``loomterm.store.hoisted``), or None: not hoisted, no session, or a
    value that names no node of the tree."""
    store = _view_store(loom)
    node = hoisted(store.view("hoist")) if store is not None else None
    return node if node is not None and node in loom.tree.nodes else None


def record_hoist(loom: Loom, node: int | None) -> None:
    """Keep the hoist (a node id, None for the whole tree) in ``loom``'s session."""
    _set_view(loom, "hoist", None if node is None else {"node": node})


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
        """Write the cursor path's KV beside the file now (``loomterm.sessions.kv_snapshot``)."""
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
            loaded, remote = model_for(data, path, how)
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
                data = retokenize_file(data, loaded, pieces, store, path)
            loom = loom_for(data, loaded, remote, how, path)
            check_vocabulary(data, loom.runner.vocab_size, path)
            if bind and store is not None:
                store.write_tree(
                    data.tree, pieces.node_pieces, data.cursor_node, model_record(loom)
                )
            restored = matches and restore_kv(loom, path, how.kv_snapshot)
            if how.reattach:
                from loomterm.sessions.models import reattach_models

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


__all__ = [
    "FLUSH_INTERVAL",
    "ModelMismatchError",
    "PieceMaker",
    "OpenOptions",
    "OpenedFile",
    "Session",
    "SessionRecorder",
    "close_session",
    "import_session",
    "list_sessions",
    "load_kv_snapshot",
    "load_session",
    "model_record",
    "open_loom",
    "read_file",
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
