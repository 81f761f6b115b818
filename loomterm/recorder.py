"""The session recorder: every change of a Loom written to its file as it happens.

Generated tokens are buffered and written at least every ``FLUSH_INTERVAL`` seconds;
everything else is written at once, one transaction per change.
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from loomterm.engine.text import PieceMaker
from loomterm.errors import LoomError
from loomterm.kv_snapshot import save_kv_snapshot
from loomterm.store import Caret, SessionStore, Typed
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine import Loom

FLUSH_INTERVAL = 0.5  # seconds: generated tokens reach the disk at least this often


def alternative_ids(nodes: Iterable[Node], start: dict[int, int] | None = None) -> set[int]:
    ids: set[int] = set()
    for node in nodes:
        first = start.get(node.id, 0) if start else 0
        for top in node.top[first:]:
            if top:
                ids.update(int(t) for t, _ in top)
    return ids


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
        elif event == "merge" and node is not None:
            self._flush()
            gone = [i for i in self._stored if i not in self.loom.tree.nodes]
            store.merge(node, gone, self._pieces.node_pieces(node))
            for i in gone:
                del self._stored[i]
            self._stored[node.id] = len(node.tokens)
        elif event == "move" and node is not None:
            self._flush_node(node)
            # Its first pieces may read differently after other tokens (a character
            # completed across the new boundary): written again, then its place.
            store.rewrite_node(node, self._pieces.node_pieces(node))
            store.update_node(node)  # the new siblings renumbered
        elif event == "rewrite" and node is not None:
            # The writer's own node retyped in place: its row and every token written
            # again, in one transaction (a crash leaves the old text or the new, whole).
            self._pending.pop(node.id, None)
            store.rewrite_node(node, self._pieces.node_pieces(node))
            self._stored[node.id] = len(node.tokens)
            self._add_vocab([node])
        elif event == "update" and node is not None:
            self._flush_node(node)
            store.update_node(node)
        elif event == "records" and node is not None:
            self._flush_node(node)
            store.update_records(node, 0, self._stored.get(node.id, 0))
            self._add_vocab([node])
        elif event == "done":
            self._flush()
        elif event == "cursor" and node is not None:
            store.set_cursor(node)
        elif event == "settings":
            store.set_settings(self.loom.settings.as_dict())
        elif event == "models":
            store.set_models(self.loom.model_table, self.loom.model_state)
        elif event == "contexts":
            store.set_contexts(self.loom.contexts.versions.as_dict())
        # Other events carry nothing the file keeps.

    def record_caret(self, caret: Caret) -> None:
        """The editor's caret settled at ``caret``: write it unless the file has it.

        Not a Loom event: the editor reports it when it settles (debounced), and at
        quit and session switch, so a caret moved within that delay before a hard kill
        is lost. A failed write stops saving like any other (:attr:`error`)."""
        with self._lock:
            if self._closed or self.read_only or self.error is not None or caret == self._caret:
                return
            try:
                assert self.store is not None
                self.store.set_caret(caret)
                self._caret = caret
            except LoomError as exc:
                self._fail(exc)

    def keep_typed(self, typed: Typed | None) -> None:
        """Write (or, None, drop) the text typed before the model read it
        (``loomterm.store.Typed``); nothing when the file already says so."""
        with self._lock:
            if self._closed or self.read_only or self.error is not None or typed == self.typed:
                return
            try:
                assert self.store is not None
                self.store.set_typed(typed)
                self.typed = typed
            except LoomError as exc:
                self._fail(exc)

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
        new = alternative_ids(nodes, start) - self._vocab
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
                    wanted = self.kv_snapshot or self.loom.settings.kv_snapshot
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
        if self.error is not None:
            raise self.error

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def caret(self) -> Caret | None:
        """The caret the file holds (as read on open, or as last written)."""
        return self._caret


@atexit.register
def _close_open_sessions() -> None:
    """Write what is still buffered when the program ends without closing."""
    for recorder in list(_open_recorders):
        try:
            recorder.close()
        except Exception:  # noqa: BLE001 - exiting anyway; nothing to report to
            pass
