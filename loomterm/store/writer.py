"""Writing a session: :class:`SessionStore` holds the lock and makes every change.

Every change is its own transaction, and the journal is a write-ahead log, so a crash
loses at most the changes not yet handed to the store (the session glue flushes
generated tokens at least every half second). Nothing is written to a file before it
has been validated read-only (:func:`loomterm.store.reader.check_file`).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loomterm.atomic import atomic_path
from loomterm.errors import SessionError
from loomterm.store import journal, schema
from loomterm.store.data import Caret, SessionData, Typed
from loomterm.store.encoding import pack_top, to_json
from loomterm.store.errors import damaged
from loomterm.store.files import build, connect, identity, remove_leftovers, remove_stale_log
from loomterm.store.lock import SessionLock
from loomterm.store.reader import check_file, read_rows
from loomterm.store.rows import (
    INSERT_NODE,
    INSERT_TOKENS,
    delete_tokens,
    insert_node,
    insert_tokens,
    logprob_value,
    node_row,
    renumber_children,
    set_key,
    token_rows,
    update_node,
    walk_with_positions,
)
from loomterm.tree import Node, Tree

# The ``session`` keys that hold the session itself: never a view.
_CONTENT_KEYS = frozenset(
    {"format", "created", "modified", "cursor", "settings", "model", "models", "model_state",
     "contexts", "caret"}
)  # fmt: skip


class SessionStore:
    """A session file open for writing: holds the lock and one connection.

    Every public method is one transaction and is safe to call from any thread (the
    engine streams tokens from a worker thread while the UI moves the cursor).
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, lock: SessionLock | None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = conn  # None once closed
        self._lock = lock
        self._mutex = threading.RLock()
        self._known_vocab: set[int] | None = None
        self._inode = identity(path)

    def missing(self) -> bool:
        """The file this store writes is no longer at its path (removed, or its folder
        was): SQLite would go on writing into the unlinked file, and lose it all."""
        return self._inode is None or identity(self.path) != self._inode

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike) -> SessionStore:
        """Validate, lock, migrate if needed, and open an existing session for writing."""
        path = Path(path)
        version = check_file(path)  # read-only: nothing is written before this passes
        lock = SessionLock(path)
        lock.acquire()
        try:
            if version < schema.SCHEMA_VERSION:
                backup = path.with_name(f"{path.name}.v{version}.bak")
                shutil.copy2(path, backup)
            # Checked again through the writing connection before its first write: the
            # file may have been replaced since check_file read it.
            conn = connect(path, version)
            if version < schema.SCHEMA_VERSION:
                schema.migrate(conn, version)
        except sqlite3.DatabaseError as exc:
            lock.release()
            raise damaged(path, str(exc)) from None
        except BaseException:
            lock.release()
            raise
        store = cls(path, conn, lock)
        try:
            replay_journal(store)
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        model: dict[str, Any],
        settings: dict[str, Any] | None = None,
        overwrite: bool = False,
        fill: Callable[[SessionStore], None] | None = None,
    ) -> SessionStore:
        """Create a new session file and open it for writing: empty (no nodes yet), or
        holding what ``fill`` writes into it.

        The file is built whole in a temporary file beside ``path`` (``fill`` writes
        there) and renamed into place only when complete, so a process killed midway
        leaves no session (only a hidden temporary file, removed by the next create of
        that name) and an old session there stays as it was. An existing session is
        replaced only with ``overwrite``; a file that is not a loomterm session is never
        replaced.
        """
        path = Path(path)
        if path.exists():
            if not overwrite:
                raise SessionError(f"a session already exists at {path}")
            check_file(path)  # refuse to clobber anything that is not ours
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = SessionLock(path)
        lock.acquire()
        try:
            if path.exists() and not overwrite:
                # Made by another process between the check above and the lock: never
                # renamed over (every writer of a session holds its lock).
                raise SessionError(f"a session already exists at {path}")
            remove_leftovers(path)
            with atomic_path(path) as tmp:
                build(tmp, model, settings or {}, fill, cls)
                remove_stale_log(path)  # while we hold the lock
            conn = connect(path)
        except sqlite3.DatabaseError as exc:
            lock.release()
            raise SessionError(f"cannot write session {path}: {exc}") from None
        except OSError as exc:
            lock.release()
            raise SessionError(f"cannot write session {path}: {exc.strerror or exc}") from None
        except BaseException:
            lock.release()
            raise
        return cls(path, conn, lock)

    def close(self) -> None:
        """Fold the write-ahead log into the file and release the lock."""
        with self._mutex:
            if self._conn is None:
                return
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.DatabaseError:
                pass  # the data is safe in the log; SQLite replays it on next open
            finally:
                self._conn.close()
                self._conn = None
                if self._lock is not None:
                    self._lock.release()

    @property
    def closed(self) -> bool:
        return self._conn is None

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions -----------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise SessionError(f"session {self.path.name} is closed")
        return self._conn

    @contextmanager
    def transaction(self, stamp: bool = True) -> Iterator[sqlite3.Connection]:
        """One atomic change; also stamps the session's last-change time (unless
        ``stamp`` is False: a change of view, such as the caret, changes no content)."""
        with self._mutex:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                if stamp:
                    conn.execute(
                        "UPDATE session SET value = ? WHERE key = 'modified'",
                        (to_json(time.time()),),
                    )
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise SessionError(f"cannot write session {self.path.name}: {exc}") from None
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    # -- nodes ------------------------------------------------------------------------
    def write_tree(
        self,
        tree: Tree,
        pieces: Callable[[Node], list[str]],
        cursor: Node,
        model: dict[str, Any] | None = None,
    ) -> None:
        """Write every node of ``tree`` (replacing what the file held) in one transaction.

        With ``model``, the tokens belong to that model from now on: it is recorded in
        the same transaction (and the old model's alternatives' text dropped), so the
        file never pairs one model's fingerprint with another's token ids.
        """
        with self.transaction() as conn:
            if model is not None:
                set_key(conn, "model", model)
                conn.execute("DELETE FROM vocab")
                self._known_vocab = None
            conn.execute("DELETE FROM tokens")
            conn.execute("DELETE FROM nodes")
            # Two statements for the whole tree, each fed by a generator: one pass,
            # linear in nodes and tokens whatever the tree's shape.
            walked = list(walk_with_positions(tree.root))  # parents before children
            conn.executemany(INSERT_NODE, (node_row(n, i) for n, i in walked))
            conn.executemany(
                INSERT_TOKENS,
                (row for node, _ in walked for row in token_rows(node, 0, pieces(node))),
            )
            set_key(conn, "cursor", cursor.id)

    def write_data(self, data: SessionData, model: dict[str, Any] | None = None) -> None:
        """Write everything ``data`` holds (its tree, pieces, keys and vocab) over what
        the file holds, in one transaction: a journal's changes, or a whole session
        kept in memory while its file could not be written. ``model`` replaces the
        model record."""
        with self.transaction() as conn:
            if model is not None:
                set_key(conn, "model", model)
            conn.execute("DELETE FROM tokens")
            conn.execute("DELETE FROM nodes")
            for node in data.tree.root.walk():
                insert_node(conn, node)
                insert_tokens(conn, node, 0, data.pieces.get(node.id, []))
            set_key(conn, "cursor", data.cursor)
            set_key(conn, "settings", data.settings)
            set_key(conn, "contexts", data.contexts)
            set_key(conn, "models", data.models)
            set_key(conn, "model_state", data.model_state)
            conn.execute("DELETE FROM session WHERE key IN ('caret', 'typed')")
            if data.caret is not None:
                set_key(conn, "caret", data.caret.as_json())
            if data.typed is not None:
                set_key(conn, "typed", data.typed.as_json())
            conn.executemany(
                "INSERT OR REPLACE INTO vocab(token, piece) VALUES (?, ?)", data.vocab.items()
            )
            self._known_vocab = None

    def add_node(self, node: Node, pieces: list[str]) -> None:
        """A new node (with whatever tokens it already has)."""
        with self.transaction() as conn:
            insert_node(conn, node)
            insert_tokens(conn, node, 0, pieces)
            renumber_children(conn, node.parent)

    def append_tokens(self, node: Node, start: int, end: int, pieces: list[str]) -> None:
        """Tokens ``start:end`` of ``node`` were added since the last write."""
        with self.transaction() as conn:
            insert_tokens(conn, node, start, pieces, end)

    def update_records(self, node: Node, start: int, end: int) -> None:
        """Tokens ``start:end`` of ``node``, already stored, got their log-probabilities
        and alternatives (typed text, after the model read it)."""
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE tokens SET logprob = ?, top = ? WHERE node = ? AND idx = ?",
                [
                    (logprob_value(node, i), pack_top(node.top[i]), node.id, i)
                    for i in range(start, end)
                ],
            )

    def rewrite_node(self, node: Node, pieces: list[str]) -> None:
        """Replace a node's row and all its tokens (after an edit that was not an append)."""
        with self.transaction() as conn:
            delete_tokens(conn, node.id)
            update_node(conn, node)
            insert_tokens(conn, node, 0, pieces)

    def split(self, head: Node, head_pieces: list[str], tail_pieces: list[str]) -> None:
        """``head`` was cut from the front of its only child (the tail keeps its id)."""
        tail = head.children[0]
        with self.transaction() as conn:
            insert_node(conn, head)
            delete_tokens(conn, tail.id)
            insert_tokens(conn, head, 0, head_pieces)
            update_node(conn, tail)
            insert_tokens(conn, tail, 0, tail_pieces)
            renumber_children(conn, head.parent)

    def merge(self, node: Node, removed: list[int], pieces: list[str]) -> None:
        """``node`` took in its parent's tokens and place (``Tree.merge``): rewrite it
        and remove the rows of ``removed`` (the parents that left the tree)."""
        with self.transaction() as conn:
            delete_tokens(conn, node.id)
            update_node(conn, node)  # parent: the old grandparent, before the delete
            insert_tokens(conn, node, 0, pieces)
            for gone in removed:
                delete_tokens(conn, gone)
                conn.execute("DELETE FROM nodes WHERE id = ?", (gone,))
            renumber_children(conn, node.parent)

    def update_node(self, node: Node) -> None:
        """A node's flags, meta, sampling or place among its siblings changed."""
        with self.transaction() as conn:
            update_node(conn, node)
            renumber_children(conn, node.parent)

    def set_cursor(self, node: Node) -> None:
        """The user moved to ``node``."""
        with self.transaction() as conn:
            set_key(conn, "cursor", node.id)

    def set_caret(self, caret: Caret) -> None:
        """The editor's caret settled at ``caret`` (``loomterm.store.data.Caret``): a key
        added without a new schema version (an older reader ignores it). Not a change of
        content: the session's last-change time stays."""
        with self.transaction(stamp=False) as conn:
            set_key(conn, "caret", caret.as_json())

    def set_view(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` in the ``session`` table: something about how
        the session is worked with rather than its content (the export dialog's last
        folder, ``export_folder``), added without a new schema version (an older reader
        ignores it). The session's last-change time stays."""
        if key in _CONTENT_KEYS:
            raise ValueError(f"{key!r} is the session's content, not a view")
        with self.transaction(stamp=False) as conn:
            set_key(conn, key, value)

    def view(self, key: str) -> Any:
        """The value :meth:`set_view` kept under ``key`` (None if none, or unreadable)."""
        with self._mutex:
            if self._conn is None:
                return None
            row = self._conn.execute("SELECT value FROM session WHERE key = ?", (key,)).fetchone()
        try:
            return json.loads(row[0]) if row is not None else None
        except ValueError:
            return None

    def set_typed(self, typed: Typed | None) -> None:
        """Keep the text typed before the model read it (``Typed``), or (None) drop it
        once the tree holds it. Like the caret, a key without a new schema version."""
        with self.transaction(stamp=typed is not None) as conn:
            if typed is None:
                conn.execute("DELETE FROM session WHERE key = 'typed'")
            else:
                set_key(conn, "typed", typed.as_json())

    def set_settings(self, settings: dict[str, Any]) -> None:
        """Replace the per-session settings."""
        with self.transaction() as conn:
            set_key(conn, "settings", settings)

    def set_models(self, table: dict[str, Any], state: dict[str, Any] | None = None) -> None:
        """Replace the table of models that write into the tree (key to record) and,
        when given, ``state`` (which were attached, which was active), together."""
        with self.transaction() as conn:
            set_key(conn, "models", table)
            if state is not None:
                set_key(conn, "model_state", state)

    def set_contexts(self, contexts: dict[str, Any]) -> None:
        """Replace the context versions (id to memory, author's note, world info)."""
        with self.transaction() as conn:
            set_key(conn, "contexts", contexts)

    def add_vocab(self, pieces: dict[int, str]) -> None:
        """Remember display text for token ids seen among alternatives."""
        if not pieces:
            return
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO vocab(token, piece) VALUES (?, ?)", pieces.items()
            )

    def known_vocab(self) -> set[int]:
        """Token ids that already have display text in the file."""
        with self._mutex:
            if self._known_vocab is None:
                self._known_vocab = {
                    row[0] for row in self._connection().execute("SELECT token FROM vocab")
                }
            return self._known_vocab

    def read(self) -> SessionData:
        """Everything in the file, read through the writer's own connection."""
        with self._mutex:
            return read_rows(self._connection(), self.path)


def replay_journal(store: SessionStore) -> int:
    """Write into ``store`` the changes its journal kept (``loomterm.store.journal``):
    the program ended while the file could not be written. Returns the lines applied;
    the journal is deleted once they are in the file. A file that still cannot be
    written raises ``SessionError`` and keeps the journal for the next open."""
    lines = journal.read_lines(store.path)
    if not lines:
        for leftover in journal.journal_files(store.path):
            leftover.unlink(missing_ok=True)  # a header only, or torn lines
        return 0
    data = store.read()
    journal.apply(data, lines)
    try:
        store.write_data(data)
    except SessionError as exc:
        kept = ", ".join(str(p) for p in journal.journal_files(store.path))
        raise SessionError(f"{exc}; its unsaved changes stay in {kept}") from None
    for path in journal.journal_files(store.path):
        path.unlink(missing_ok=True)
    return len(lines)


def write_session(
    path: str | os.PathLike, data: SessionData, *, overwrite: bool = False
) -> SessionStore:
    """Create a session file holding ``data`` (used by import) and return it, open.

    Everything is written into a temporary file beside ``path`` that is renamed into
    place once complete (:meth:`SessionStore.create`): a write that fails, or a process
    killed midway, leaves no session behind (a file without its tree could not be
    opened, and would block the name).
    """

    def fill(store: SessionStore) -> None:
        store.write_tree(data.tree, lambda node: data.pieces.get(node.id, []), data.cursor_node)
        store.add_vocab(data.vocab)
        if data.models:
            store.set_models(data.models, data.model_state or None)
        if data.contexts:
            store.set_contexts(data.contexts)
        if data.caret is not None:
            store.set_caret(data.caret)
        if data.hoist is not None:
            store.set_view("hoist", {"node": data.hoist})

    return SessionStore.create(
        path, model=data.model, settings=data.settings, overwrite=overwrite, fill=fill
    )
