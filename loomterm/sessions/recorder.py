"""The session recorder: every change of a Loom written to its file as it happens.

Generated tokens are buffered and written at least every ``FLUSH_INTERVAL`` seconds;
everything else is written at once, one transaction per change.

A write that fails (a full disk, a folder made read-only or removed) never stops the
work and never loses it: every change from then on is kept in memory (the live tree)
and appended to a journal (``loomterm.store.journal``), the writes are retried with a
growing delay (``RETRY_DELAYS``), and once one succeeds the whole session is written
and the journal deleted. Whoever shows the state hears it (:meth:`watch`).
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from loomterm.engine.events import Event
from loomterm.engine.text import PieceMaker
from loomterm.errors import LoomError, SessionError
from loomterm.sessions.keeping import (
    Keeper,
    SaveState,
    alternative_ids,
    answer,
    made_again,
    settled,
    take,
    whole_data,
)
from loomterm.sessions.kv_snapshot import save_kv_snapshot
from loomterm.store import Caret, SessionStore, Typed
from loomterm.store.journal import Journal
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine import Loom

FLUSH_INTERVAL = 0.5  # seconds: generated tokens reach the disk at least this often
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # seconds between tries of a failed save


_open_recorders: weakref.WeakSet[SessionRecorder] = weakref.WeakSet()


class SessionRecorder:
    """Listens to a Loom and writes each change to its session file as it happens.

    Generated tokens are buffered and written when half a second has passed since the
    last write (checked at each token, and by a timer in case tokens stop coming), and
    at once when a generation ends. Everything else is written immediately, one
    transaction per change.

    A write that fails (disk full...) does not break the engine mid-generation: the
    error is kept in :attr:`error` (reported once as a warning, and to :meth:`watch`
    listeners), every change from then on goes to the :attr:`journal`, and the write is
    tried again with a growing delay; once it succeeds the whole session is written,
    :attr:`error` is None again and the journal is deleted. :meth:`close` tries a last
    time and raises the error when even that fails (the journal stays, and is replayed
    into the file when it is next opened).

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
        caret: Caret | None = None,
        typed: Typed | None = None,
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
        self._caret = caret  # the caret the file holds (not written again)
        self.typed = typed  # text typed before the model read it, as the file holds it
        self._vocab: set[int] = set()  # token ids whose text the file (or journal) holds
        self._retry: threading.Timer | None = None
        self._retry_at: float | None = None
        self._tries = 0
        self._watchers: list[Callable[[SaveState], None]] = []
        if store is not None:
            self._stored = {node.id: len(node.tokens) for node in loom.tree.nodes.values()}
            self._vocab |= set(store.known_vocab())
            _open_recorders.add(self)
        books = (self._stored, self._pending, self._vocab)  # shared, the same objects
        self._keeper = Keeper(loom, self.path, self._pieces, books, self._start_timer, self._tell)

    # -- events -----------------------------------------------------------------------
    def __call__(self, event: Event, node: Node | None) -> None:
        if self._closed or self.read_only:
            return
        with self._lock:
            if self.error is None:
                try:
                    if event is not Event.TOKENS:  # a token is checked at its flush
                        self._check_file()
                    self._handle(event, node)
                    return
                except LoomError as exc:
                    self._fail(exc)
            self._keeper.keep(event, node)

    def _check_file(self) -> None:
        """SQLite writes on into a file that was removed (or whose folder was): that
        would lose everything at close, so it counts as a failed write."""
        if self._store().missing():
            raise SessionError(f"session file {self.path} was removed")

    def _handle(self, event: Event, node: Node | None) -> None:
        """Write one change to the file, as :data:`WRITES` says for its event (events
        the file keeps nothing of are not in it)."""
        answer(self, event, node, NODE_WRITES, WRITES)

    def _write_tokens(self, node: Node) -> None:
        """Tokens are written in batches: at most every ``FLUSH_INTERVAL``."""
        self._pending[node.id] = node
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self._check_file()
            self._flush()
        else:
            self._start_timer()

    def _write_add(self, node: Node) -> None:
        self._flush()
        self._store().add_node(node, self._pieces.node_pieces(node))
        self._stored[node.id] = len(node.tokens)
        self._add_vocab([node])

    def _write_split(self, node: Node) -> None:
        self._flush()
        tail = node.children[0]
        pieces = self._pieces
        self._store().split(node, pieces.node_pieces(node), pieces.node_pieces(tail))
        self._stored[node.id] = len(node.tokens)
        self._stored[tail.id] = len(tail.tokens)

    def _write_merge(self, node: Node) -> None:
        self._flush()
        gone = [i for i in self._stored if i not in self.loom.tree.nodes]
        self._store().merge(node, gone, self._pieces.node_pieces(node))
        for i in gone:
            del self._stored[i]
        self._stored[node.id] = len(node.tokens)

    def _write_move(self, node: Node) -> None:
        self._flush_node(node)
        # Its first pieces may read differently after other tokens (a character
        # completed across the new boundary): written again, then its place.
        self._store().rewrite_node(node, self._pieces.node_pieces(node))
        self._store().update_node(node)  # the new siblings renumbered

    def _write_rewrite(self, node: Node) -> None:
        # The writer's own node retyped in place: its row and every token written
        # again, in one transaction (a crash leaves the old text or the new, whole).
        self._pending.pop(node.id, None)
        self._store().rewrite_node(node, self._pieces.node_pieces(node))
        self._stored[node.id] = len(node.tokens)
        self._add_vocab([node])

    def _write_update(self, node: Node) -> None:
        self._flush_node(node)
        self._store().update_node(node)

    def _write_records(self, node: Node) -> None:
        self._flush_node(node)
        self._store().update_records(node, 0, self._stored.get(node.id, 0))
        self._add_vocab([node])

    def _write_cursor(self, node: Node) -> None:
        self._store().set_cursor(node)

    def _write_settings(self) -> None:
        self._store().set_settings(self.loom.settings.as_dict())

    def _write_models(self) -> None:
        self._store().set_models(self.loom.model_table, self.loom.model_state)

    def _write_contexts(self) -> None:
        self._store().set_contexts(self.loom.contexts.versions.as_dict())

    def _store(self) -> SessionStore:
        assert self.store is not None  # a recorder that writes has a store
        return self.store

    def _start_timer(self) -> None:
        """Flush the pending tokens in ``FLUSH_INTERVAL``, unless a timer runs already."""
        if self._timer is None:
            self._timer = threading.Timer(FLUSH_INTERVAL, self._timed_flush)
            self._timer.daemon = True
            self._timer.start()

    def record_caret(self, caret: Caret) -> None:
        """The editor's caret settled at ``caret``: write it unless the file has it.

        Not a Loom event: the editor reports it when it settles (debounced), and at
        quit and session switch, so a caret moved within that delay before a hard kill
        is lost. A failed write is kept and retried like any other (:attr:`error`)."""
        with self._lock:
            if self._closed or self.read_only or caret == self._caret:
                return
            self._write_key("caret", caret.as_json(), lambda store: store.set_caret(caret))
            self._caret = caret

    def keep_typed(self, typed: Typed | None) -> None:
        """Write (or, None, drop) the text typed before the model read it
        (``loomterm.store.Typed``); nothing when the file already says so."""
        with self._lock:
            if self._closed or self.read_only or typed == self.typed:
                return
            value = typed.as_json() if typed is not None else None
            self._write_key("typed", value, lambda store: store.set_typed(typed))
            self.typed = typed

    def _write_key(self, key: str, value: object, write: Callable[[SessionStore], None]) -> None:
        if self.error is None:
            try:
                self._check_file()
                write(self._store())
                return
            except LoomError as exc:
                self._fail(exc)
        self._keeper.write("set", {key: value})

    def _timed_flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
            if self.error is not None:
                self._keeper.keep_pending()
                return
            self._flush_or_keep()

    def _flush_or_keep(self, check: bool = True) -> LoomError | None:
        """Write the buffered tokens (the file checked first, if ``check``); a write the
        file refuses fails it and journals them instead: its error, None if it worked."""
        try:
            if check:
                self._check_file()
            self._flush()
        except LoomError as exc:
            self._fail(exc)
            self._keeper.keep_pending()
            return exc
        return None

    # -- when the file cannot be written -----------------------------------------------
    def _fail(self, exc: LoomError) -> None:
        """The file refused a write: keep everything it lacks in the journal, and try
        again later."""
        first = self.error is None
        self.error = exc
        if first:
            warnings.warn(
                f"session {self.path.name} cannot be saved now ({exc}); changes are kept "
                "and saved again once it can be written",
                stacklevel=3,
            )
            self._keeper.begin()
        self._schedule_retry()
        self._tell()

    def carry_on_failing(self, journal: Journal, error: LoomError) -> None:
        """The file refused a write before this recorder existed (typing while the
        model loaded), kept in ``journal``: adopt it, and write the whole session (and
        delete the journal) at the next try that works."""
        with self._lock:
            self._keeper.journal = journal
            if self.error is None:
                self._fail(error)

    def _schedule_retry(self) -> None:
        if self._closed or self._retry is not None:
            return
        delay = RETRY_DELAYS[min(self._tries, len(RETRY_DELAYS) - 1)]
        self._tries += 1
        self._retry_at = time.monotonic() + delay
        self._retry = threading.Timer(delay, self._retry_now)
        self._retry.daemon = True
        self._retry.start()

    def _cancel_retry(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _retry_now(self) -> None:
        # The Loom's lock first, as the engine takes it before it tells the recorder.
        with self.loom.exclusive(), self._lock:
            self._retry = None
            self._retry_at = None
            if self._closed or self.error is None:
                return
            self.try_again()

    def try_again(self) -> bool:
        """Write the whole session now (the file failed before); True when it worked.
        Called by the retry timer, by :meth:`close`, and by whoever wants it now."""
        with self._lock:
            if self.error is None or self._closed:
                return self.error is None
            try:
                self._write_whole()
            except LoomError as exc:
                self.error = exc
                self._schedule_retry()
                self._tell()
                return False
            self.error = None
            self._tries = 0
            self._pending.clear()
            self._stored.clear()
            self._stored.update({n.id: len(n.tokens) for n in self.loom.tree.nodes.values()})
            self._keeper.discard()
            self._cancel_retry()
            self._retry_at = None
            self._tell()
            return True

    def _write_whole(self) -> None:
        """Everything the live session holds, over what the file holds, in one
        transaction; a file that was removed is made again (and its folder)."""
        store = self._store()
        data = whole_data(self.loom, self._pieces, self._caret, self.typed)
        if store.missing():
            self.store = store = made_again(self.loom, store, self.path, data.settings)
        store.write_data(data)
        self._vocab.clear()
        self._vocab |= set(data.vocab)

    def watch(self, listener: Callable[[SaveState], None]) -> None:
        """Call ``listener(state)`` (from any thread) whenever saving fails, is tried
        again, or works again."""
        self._watchers.append(listener)

    @property
    def state(self) -> SaveState:
        """Whether the changes reach the file now (:class:`SaveState`)."""
        if self.error is None:
            return SaveState()
        text = str(self.error).splitlines()[0] if str(self.error) else "write failed"
        keeper = self._keeper
        return SaveState(text, keeper.journal.where, keeper.error, self._retry_at)

    def _tell(self) -> None:
        state = self.state
        for listener in list(self._watchers):
            try:
                listener(state)
            except Exception:  # noqa: BLE001 - a listener's fault is not the save's
                pass

    # -- writing ----------------------------------------------------------------------
    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for node in take(self._pending):
            self._flush_node(node)
        self._last_flush = time.monotonic()

    def _flush_node(self, node: Node) -> None:
        store = self._store()
        self._pending.pop(node.id, None)
        end = settled(node)  # the engine may be appending from another thread
        start = self._stored.get(node.id, 0)
        if end > start:
            store.append_tokens(node, start, end, self._pieces.node_pieces(node, start, end))
            self._add_vocab([node], {node.id: start})
        elif end < start:
            store.rewrite_node(node, self._pieces.node_pieces(node, 0, end))
        self._stored[node.id] = end

    def _add_vocab(self, nodes: list[Node], start: dict[int, int] | None = None) -> None:
        new = alternative_ids(nodes, start) - self._vocab
        if new:
            self._store().add_vocab({t: self._pieces.piece(t) for t in new})
            self._vocab |= new

    def flush(self) -> None:
        """Write buffered tokens now; raise the error that keeps the file from being
        written, if any (the changes are kept: see :attr:`journal`)."""
        with self._lock:
            if self.error is not None:
                self._keeper.keep_pending()
                if not self.try_again():
                    raise self.error
            if not self._closed and not self.read_only:
                refused = self._flush_or_keep(check=False)
                if refused is not None:
                    raise refused

    def close(self, quiet: bool = False, snapshot: bool = True) -> None:
        """Flush, write the KV snapshot if asked for (and ``snapshot``: not while the
        engine still works, which it would wait for), and release the file. A file that
        still cannot be written is tried once more; then the error is raised (unless
        ``quiet``) and the journal stays, to be replayed when it is next opened."""
        with self._lock:
            if self._closed:
                return
            self._cancel_retry()
            if not self.read_only and self.error is not None:
                self._keeper.keep_pending()
                self.try_again()
            if not self.read_only and self.error is None and self._flush_or_keep() is not None:
                self.try_again()
            self._cancel_retry()
            try:
                if not self.read_only and self.error is None:
                    wanted = snapshot and (self.kv_snapshot or self.loom.settings.kv_snapshot)
                    if wanted and self.loom.capabilities.node_kv:  # a server keeps its own
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
        if self.error is not None and not quiet:
            where = self.journal.where
            kept = f"; changes are kept in {where}" if where is not None else ""
            raise SessionError(f"{self.error}{kept}") from None

    @property
    def journal(self) -> Journal:
        """Where the changes the file could not take are kept."""
        return self._keeper.journal

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def caret(self) -> Caret | None:
        """The caret the file holds (as read on open, or as last written)."""
        return self._caret


R = SessionRecorder

NODE_WRITES: dict[Event, Callable[[SessionRecorder, Node], None]] = {
    Event.TOKENS: R._write_tokens,
    Event.ADD: R._write_add,
    Event.SPLIT: R._write_split,
    Event.MERGE: R._write_merge,
    Event.MOVE: R._write_move,
    Event.REWRITE: R._write_rewrite,
    Event.UPDATE: R._write_update,
    Event.RECORDS: R._write_records,
    Event.CURSOR: R._write_cursor,
}
"""How the file takes each change to one node."""

WRITES: dict[Event, Callable[[SessionRecorder], None]] = {
    Event.DONE: R._flush,
    Event.SETTINGS: R._write_settings,
    Event.MODELS: R._write_models,
    Event.CONTEXTS: R._write_contexts,
}
"""How the file takes each change to the session as a whole."""

del R


@atexit.register
def _close_open_sessions() -> None:
    """Write what is still buffered when the program ends without closing."""
    for recorder in list(_open_recorders):
        try:
            recorder.close()
        except Exception:  # noqa: BLE001 - exiting anyway; nothing to report to
            pass
