"""Glue between a live :class:`~loomterm.engine.Loom` and its session file.

- :func:`save_loom` writes the whole tree, then attaches a :class:`SessionRecorder`
  that streams every later change into the file as it happens.
- :func:`open_loom` rebuilds the tree from a file and wraps it in a Loom on the same
  model (checked by fingerprint; a different model is refused unless the caller asks
  to open read-only or to re-tokenize the text).
- :func:`save_kv_snapshot` / the ``kv_snapshot`` option keep the active path's keys and
  values in ``<name>.kv.safetensors`` beside the file, so a long session continues
  with no prefill. A snapshot from another model, dtype or token path is ignored with a
  warning, never used.
- :func:`resolve_session` / :func:`list_sessions`: names under ``sessions_dir()``.

The engine is imported lazily: resolving names and listing sessions stay light.
"""

from __future__ import annotations

import atexit
import difflib
import hashlib
import json
import os
import shutil
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm import store as store_mod
from loomterm.atomic import atomic_path
from loomterm.engine.text import PieceMaker
from loomterm.errors import LoomError, SessionError
from loomterm.locations import sessions_dir
from loomterm.store import (
    SESSION_SUFFIX,
    ModelMismatchError,
    SessionData,
    SessionStore,
    SessionSummary,
    pack_tokens,
)
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.engine.models import LoadedModel

SNAPSHOT_SUFFIX = ".kv.safetensors"
SNAPSHOT_FORMAT = "loomterm-kv"
SNAPSHOT_VERSION = "1"
FLUSH_INTERVAL = 0.5  # seconds: generated tokens reach the disk at least this often


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


# -- token text -----------------------------------------------------------------------


def _alternative_ids(nodes: Iterable[Node], start: dict[int, int] | None = None) -> set[int]:
    ids: set[int] = set()
    for node in nodes:
        first = start.get(node.id, 0) if start else 0
        for top in node.top[first:]:
            if top:
                ids.update(int(t) for t, _ in top)
    return ids


# -- the recorder ---------------------------------------------------------------------


_open_recorders: weakref.WeakSet[SessionRecorder] = weakref.WeakSet()


class SessionRecorder:
    """Listens to a Loom and writes each change to its session file as it happens.

    Generated tokens are buffered and written when half a second has passed since the
    last write (checked at each token, and by a timer in case tokens stop coming), and
    at once when a generation ends. Everything else is written immediately, one
    transaction per change.

    A write that fails (disk full...) does not break the engine mid-generation: the
    error is kept in :attr:`error`, reported once as a warning, and raised by the next
    :meth:`flush` or :meth:`close`.

    Attributes:
        path: The session file.
        read_only: True for a session opened read-only: nothing is written.
        kv_snapshot: Write a KV snapshot of the cursor's path on :meth:`close`.
    """

    def __init__(
        self,
        loom: Loom,
        store: SessionStore | None,
        path: Path,
        pieces: PieceMaker | None = None,
        kv_snapshot: bool = False,
    ) -> None:
        self.loom = loom
        self.store = store
        self.path = Path(path)
        self.read_only = store is None
        self.kv_snapshot = kv_snapshot
        self.error: LoomError | None = None
        self._pieces = pieces or PieceMaker(loom.codec)
        self._lock = threading.RLock()
        self._stored: dict[int, int] = {}  # node id -> tokens already in the file
        self._pending: dict[int, Node] = {}
        self._last_flush = time.monotonic()
        self._timer: threading.Timer | None = None
        self._closed = False
        if store is not None:
            self._stored = {node.id: len(node.tokens) for node in loom.tree.nodes.values()}
            self._vocab = set(store.known_vocab())
            _open_recorders.add(self)

    # -- events -----------------------------------------------------------------------
    def __call__(self, event: str, node: Node | None) -> None:
        if self._closed or self.read_only or self.error is not None:
            return
        with self._lock:
            try:
                self._handle(event, node)
            except LoomError as exc:
                self._fail(exc)

    def _handle(self, event: str, node: Node | None) -> None:
        store = self.store
        assert store is not None
        if event == "tokens" and node is not None:
            self._pending[node.id] = node
            if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
                self._flush()
            elif self._timer is None:
                self._timer = threading.Timer(FLUSH_INTERVAL, self._timed_flush)
                self._timer.daemon = True
                self._timer.start()
        elif event == "add" and node is not None:
            self._flush()
            store.add_node(node, self._pieces.node_pieces(node))
            self._stored[node.id] = len(node.tokens)
            self._add_vocab([node])
        elif event == "split" and node is not None:
            self._flush()
            tail = node.children[0]
            store.split(node, self._pieces.node_pieces(node), self._pieces.node_pieces(tail))
            self._stored[node.id] = len(node.tokens)
            self._stored[tail.id] = len(tail.tokens)
        elif event == "update" and node is not None:
            self._flush_node(node)
            store.update_node(node)
        elif event == "done":
            self._flush()
        elif event == "cursor" and node is not None:
            store.set_cursor(node)
        elif event == "settings":
            store.set_settings(self.loom.settings.as_dict())
        # Other events carry nothing the file keeps.

    def _timed_flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed or self.error is not None:
                return
            try:
                self._flush()
            except LoomError as exc:
                self._fail(exc)

    def _fail(self, exc: LoomError) -> None:
        self.error = exc
        warnings.warn(f"session {self.path.name} is no longer being saved: {exc}", stacklevel=3)

    # -- writing ----------------------------------------------------------------------
    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, {}
        for node in pending.values():
            self._flush_node(node)
        self._last_flush = time.monotonic()

    def _flush_node(self, node: Node) -> None:
        store = self.store
        assert store is not None
        self._pending.pop(node.id, None)
        # The engine may be appending from another thread: write only what all three
        # lists already hold.
        end = min(len(node.tokens), len(node.logprobs), len(node.top))
        start = self._stored.get(node.id, 0)
        if end > start:
            store.append_tokens(node, start, end, self._pieces.node_pieces(node, start, end))
            self._add_vocab([node], {node.id: start})
        elif end < start:
            store.rewrite_node(node, self._pieces.node_pieces(node, 0, end))
        self._stored[node.id] = end

    def _add_vocab(self, nodes: list[Node], start: dict[int, int] | None = None) -> None:
        assert self.store is not None
        new = _alternative_ids(nodes, start) - self._vocab
        if new:
            self.store.add_vocab({t: self._pieces.piece(t) for t in new})
            self._vocab |= new

    def flush(self) -> None:
        """Write buffered tokens now; raise the error that stopped saving, if any."""
        with self._lock:
            if self.error is not None:
                raise self.error
            if not self._closed and not self.read_only:
                self._flush()

    def close(self) -> None:
        """Flush, write the KV snapshot if asked for, and release the file."""
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only and self.error is None:
                    self._flush()
                    if self.kv_snapshot or self.loom.settings.kv_snapshot:
                        try:
                            save_kv_snapshot(self.loom, self.path)
                        except LoomError as exc:
                            warnings.warn(f"KV snapshot not saved: {exc}", stacklevel=2)
            finally:
                self._closed = True
                self.loom.unsubscribe(self)
                if self.store is not None:
                    self.store.close()
                _open_recorders.discard(self)
        if self.error is not None:
            raise self.error

    @property
    def closed(self) -> bool:
        return self._closed


@atexit.register
def _close_open_sessions() -> None:
    """Write what is still buffered when the program ends without closing."""
    for recorder in list(_open_recorders):
        try:
            recorder.close()
        except Exception:  # noqa: BLE001 - exiting anyway; nothing to report to
            pass


_sessions: weakref.WeakKeyDictionary[Loom, Session] = weakref.WeakKeyDictionary()


def session_of(loom: Loom) -> Session | None:
    """The session ``loom`` is recorded in (made by :class:`Session`), if any."""
    return _sessions.get(loom)


def close_session(loom: Loom) -> None:
    """Detach ``loom`` from its file: flush, snapshot if asked, release the lock."""
    session = session_of(loom)
    if session is not None:
        session.close()


# -- model identity -------------------------------------------------------------------


FINGERPRINT_KEYS = ("config", "weights", "tokenizer")


def model_record(loaded: LoadedModel | Loom) -> dict[str, Any]:
    """What a session file keeps about its model: name, source, fingerprint, dtype."""
    runner = getattr(loaded, "runner", None)
    return runner.identity() if runner is not None else loaded.identity()


def same_model(stored: dict[str, Any] | None, given: dict[str, Any] | None) -> bool:
    """True when two fingerprints name the same config, weights and tokenizer."""
    stored, given = stored or {}, given or {}
    return all(
        stored.get(key) is not None and stored.get(key) == given.get(key)
        for key in FINGERPRINT_KEYS
    )


def _short(fingerprint: dict[str, Any], key: str) -> str:
    value = str(fingerprint.get(key) or "?")
    return value[:10]


def mismatch_error(name: str, stored: dict[str, Any], loaded: LoadedModel) -> ModelMismatchError:
    """A clear, one-line refusal naming both models and the two ways forward."""
    old = stored.get("fingerprint") or {}
    new = loaded.fingerprint
    differs = [key for key in FINGERPRINT_KEYS if old.get(key) != new.get(key)]
    return ModelMismatchError(
        f"session {name!r} was made with {stored.get('name') or '?'} but this is "
        f"{loaded.name} ({', '.join(differs)} differ: "
        + ", ".join(f"{k} {_short(old, k)} vs {_short(new, k)}" for k in differs)
        + "); its token ids would be wrong here. Open it read-only, or re-tokenize its "
        "text with the new model (--read-only / --retokenize)",
        stored=old,
        given=dict(new),
    )


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

    def close(self) -> None:
        """Flush, write the KV snapshot if asked for (``kv_snapshot``), release the file."""
        self.recorder.close()

    def save_snapshot(self) -> Path:
        """Write the cursor path's KV beside the file now (see :func:`save_kv_snapshot`)."""
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
        if current is not None:
            current.close()
        with loom.exclusive():
            store = SessionStore.create(
                path, model=model_record(loom), settings=loom.settings.as_dict(), overwrite=True
            )
            try:
                pieces = PieceMaker(loom.codec)
                store.write_tree(loom.tree, pieces.node_pieces, loom.cursor)
                store.add_vocab(
                    {t: pieces.piece(t) for t in _alternative_ids(list(loom.tree.nodes.values()))}
                )
            except BaseException:
                store.close()
                raise
            session = cls(loom, SessionRecorder(loom, store, path, pieces, kv_snapshot))
        if kv_snapshot:
            save_kv_snapshot(loom, path)
        return session

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        model: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        n_ctx: int | None = None,
        kv_budget: int | str | None = None,
        progress: Callable[..., None] | None = None,
        read_only: bool = False,
        retokenize: bool = False,
        kv_snapshot: bool | None = None,
    ) -> Session:
        """Open a saved session on a live Loom.

        Args:
            path: A session name or file.
            model: The model to use; None means the one the session was made with.
            read_only: Do not lock the file or write to it; changes stay in memory.
            retokenize: If ``model`` differs from the session's, re-tokenize every
                node's text with it (the old file is kept as ``<file>.<time>.bak``;
                logprobs and alternatives, which belonged to the old model, are
                dropped). With ``read_only`` a different model gets a re-tokenized copy
                in memory.
            kv_snapshot: Use (and on close, refresh) a KV snapshot beside the file.
                None: use one if present.

        Raises:
            SessionError: missing, damaged, newer-schema or locked file.
            ModelMismatchError: ``model`` is not the session's model and neither
                ``read_only`` nor ``retokenize`` was asked for.
        """
        from loomterm.engine import Loom
        from loomterm.engine.models import load_model
        from loomterm.settings import Settings

        path = resolve_session(path)
        store: SessionStore | None = None
        if read_only:
            data = store_mod.load(path)
        else:
            store = SessionStore.open(path)  # validates first, then locks
        try:
            if store is not None:
                data = store.read()
            source = model or data.model.get("source")
            if not source:
                raise SessionError(f"session {path.name} records no model: pass one with --model")
            loaded = load_model(source, device=device, dtype=dtype, progress=progress)
            matches = same_model(data.model.get("fingerprint"), loaded.fingerprint)
            if not matches and not (retokenize or read_only):
                raise mismatch_error(data.name, data.model, loaded)
            pieces = PieceMaker.for_tokenizer(loaded.tokenizer)
            if not matches:
                data = retokenized(data, loaded, pieces)
                if store is not None:
                    backup = path.with_name(f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
                    shutil.copy2(path, backup)
                    store.write_tree(
                        data.tree, lambda n: data.pieces[n.id], data.cursor_node, model=data.model
                    )
            loom = Loom.from_loaded(loaded, n_ctx=n_ctx, tree=data.tree, kv_budget=kv_budget)
            settings, notes = Settings.from_stored(data.settings)
            for note in notes:
                warnings.warn(f"session {path.name}: {note}", stacklevel=2)
            loom.settings = settings
            loom.cursor = data.cursor_node
            if progress is not None:
                loom.progress = progress
            snapshot = snapshot_path(path)
            restored = False
            if matches and kv_snapshot is not False and snapshot.exists():
                restored = load_kv_snapshot(loom, snapshot)
        except BaseException:
            if store is not None:
                store.close()
            raise
        recorder = SessionRecorder(
            loom, store, path, pieces, kv_snapshot=bool(kv_snapshot) or restored
        )
        session = cls(loom, recorder)
        _settle_approx(loom, recorder)
        return session


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

    tree = retokenize_tree(text_tree_of(data), _encoder(loaded.tokenizer))
    return SessionData(
        tree=tree,
        pieces={node.id: pieces.node_pieces(node) for node in tree.root.walk()},
        cursor=data.cursor,
        settings=data.settings,
        model=model_record(loaded),
        vocab={},
        created=data.created,
        modified=data.modified,
        name=data.name,
    )


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
) -> SessionData:
    """Write an imported tree (from :func:`loomterm.export.read_import`) as a new session.

    A loomterm tree with tokens is written as is, without loading any model, unless
    ``model`` names a different one (then its text is re-tokenized). A text-only tree
    is tokenized with ``model`` (None: the default model).
    """
    from loomterm.export import TextTree, retokenize_tree

    target = session_path(target)
    if target.exists():
        raise SessionError(f"a session already exists at {target}; choose another name")
    if isinstance(source, SessionData) and model is None and source.model.get("fingerprint"):
        data = source
    else:
        from loomterm.engine.models import load_model

        loaded = load_model(model or source_model(source), device=device, dtype=dtype)
        pieces = PieceMaker.for_tokenizer(loaded.tokenizer)
        if isinstance(source, SessionData) and same_model(
            source.model.get("fingerprint"), loaded.fingerprint
        ):
            data = source
        elif isinstance(source, SessionData):
            data = retokenized(source, loaded, pieces)
        else:
            assert isinstance(source, TextTree)
            tree = retokenize_tree(source, _encoder(loaded.tokenizer))
            data = SessionData(
                tree=tree,
                pieces={node.id: pieces.node_pieces(node) for node in tree.root.walk()},
                cursor=source.cursor,
                settings=source.settings,
                model=model_record(loaded),
                created=source.created_at,
                modified=time.time(),
                name=target.name.removesuffix(SESSION_SUFFIX),
            )
    store_mod.write_session(target, data).close()
    return store_mod.load(target)


def source_model(source: Any) -> str | None:
    """The model an imported tree names, if any (text-only trees name none)."""
    model = getattr(source, "model", None) or {}
    return model.get("source") if isinstance(model, dict) else None


# -- KV snapshots ---------------------------------------------------------------------


def snapshot_path(session: str | os.PathLike) -> Path:
    """``story.loom`` -> ``story.kv.safetensors``."""
    session = Path(session)
    return session.with_name(session.name.removesuffix(SESSION_SUFFIX) + SNAPSHOT_SUFFIX)


def _prefix_hash(tokens: list[int]) -> str:
    return hashlib.sha256(pack_tokens(tokens)).hexdigest()


def save_kv_snapshot(loom: Loom, session: str | os.PathLike | None = None) -> Path:
    """Write the keys and values of the cursor's path beside the session file.

    The file records the model fingerprint, dtype and, per node, a hash of every token
    its KV depends on, so :func:`load_kv_snapshot` can refuse anything stale.
    """
    from safetensors.torch import save_file

    current = session_of(loom)
    if session is None:
        if current is None:
            raise SessionError("the loom has no session file: save it first")
        session = current.path
    target = snapshot_path(session)
    identity = model_record(loom)
    node = loom.cursor
    with loom.exclusive():
        if node.end > 0:
            loom.next_logits(node)  # makes sure the whole path's KV is computed
        tensors: dict[str, Any] = {}
        entries = []
        path_tokens: list[int] = []
        for item in node.path():
            kv = item.kv
            if kv is not None and kv.shape[3] > 0:
                length = int(kv.shape[3])
                # clone: views into shared storage cannot be saved one by one.
                tensors[f"node.{item.id}"] = kv.detach().to("cpu").contiguous().clone()
                entries.append([item.id, length, _prefix_hash(path_tokens + item.tokens[:length])])
            path_tokens.extend(item.tokens)
            if item.tokens and (kv is None or kv.shape[3] < len(item.tokens)):
                break  # KV after a gap would not be usable anyway
    metadata = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "fingerprint": json.dumps(identity["fingerprint"], sort_keys=True),
        "dtype": identity["dtype"],
        "cursor": str(node.id),
        "nodes": json.dumps(entries),
    }
    try:
        with atomic_path(target) as tmp:
            save_file(tensors, str(tmp), metadata=metadata)
    except OSError as exc:
        raise SessionError(f"cannot write KV snapshot {target}: {exc.strerror or exc}") from None
    return target


def load_kv_snapshot(loom: Loom, snapshot: str | os.PathLike) -> bool:
    """Put a snapshot's KV back on the nodes it belongs to. Returns True when used.

    Anything that does not match exactly (model fingerprint, dtype, the tokens each
    node's KV depends on) is skipped with a warning; the engine then computes the KV
    itself, so a stale snapshot can cost time but never give wrong logits.
    """
    from safetensors import safe_open

    snapshot = Path(snapshot)
    try:
        with safe_open(str(snapshot), framework="pt") as handle:
            meta = handle.metadata() or {}
            if meta.get("format") != SNAPSHOT_FORMAT or meta.get("version") != SNAPSHOT_VERSION:
                return _ignore(snapshot, "not a loomterm KV snapshot of this version")
            identity = model_record(loom)
            if not same_model(json.loads(meta.get("fingerprint", "{}")), identity["fingerprint"]):
                return _ignore(snapshot, "made with another model")
            if meta.get("dtype") != identity["dtype"]:
                return _ignore(snapshot, f"made in {meta.get('dtype')}, not {identity['dtype']}")
            plan = []
            for node_id, length, digest in json.loads(meta.get("nodes", "[]")):
                node = loom.tree.nodes.get(int(node_id))
                if node is None or length > len(node.tokens):
                    continue
                # The hash covers every token this KV attended to, so a match means the
                # KV is exactly that of this node on its current path.
                above = node.parent.path_tokens() if node.parent is not None else []
                if _prefix_hash(above + node.tokens[:length]) == digest:
                    plan.append((node, handle.get_tensor(f"node.{node_id}")))
    except (OSError, ValueError, KeyError, json.JSONDecodeError, RuntimeError) as exc:
        return _ignore(snapshot, f"unreadable ({exc})")
    if not plan:
        return _ignore(snapshot, "its token path no longer matches the session")
    with loom.exclusive():
        for node, kv in plan:
            node.kv = kv.to(device=loom.runner.device, dtype=loom.runner.dtype)
    return True


def _ignore(snapshot: Path, why: str) -> bool:
    warnings.warn(f"ignoring KV snapshot {snapshot.name}: {why}", stacklevel=3)
    return False


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
    "open_loom",
    "resolve_session",
    "retokenized",
    "same_model",
    "save_kv_snapshot",
    "save_loom",
    "session_path",
    "snapshot_path",
]
