"""The on-disk session: one loom per SQLite file.

Standard library only (``sqlite3``, ``fcntl``); nothing here knows about torch or the UI.

Layout (schema version 1, kept in ``PRAGMA user_version``; the file is marked as ours by
``PRAGMA application_id``)::

    session(key TEXT PRIMARY KEY, value TEXT)      -- JSON values: format, created,
                                                    -- modified, cursor, settings,
                                                    -- model {name, source, fingerprint}
    nodes(id, parent, position, origin, approx, sampling, seed, created, meta)
                                                    -- one row per node; ``position`` is
                                                    -- the order among its siblings
    tokens(node, idx, token, piece, logprob, top)   -- one row per token; ``piece`` is
                                                    -- the token's display text, ``top``
                                                    -- the packed alternatives (see
                                                    -- ``pack_top``)
    vocab(token, piece)                             -- display text of alternative ids

A row per token keeps streaming cheap: appending tokens during generation inserts new
rows instead of rewriting a growing blob. Every change is its own transaction, and the
journal is a write-ahead log, so a crash loses at most the changes not yet handed to the
store (the session glue flushes generated tokens at least every half second).

Safety rules:

- A file is validated through a read-only connection before anything may write to it;
  a damaged, foreign or newer file raises :class:`SessionError` and is left untouched.
- A writer holds an exclusive ``flock`` on ``.<file>.lock`` for as long as it is open.
  The operating system drops it when the process dies, so a crash never leaves a
  session locked. A second writer is refused; readers need no lock.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from loomterm.errors import SessionError
from loomterm.tree import Alternative, Node, Origin, Tree

SESSION_SUFFIX = ".loom"
SCHEMA_VERSION = 1
APPLICATION_ID = 0x4C4F4F4D  # "LOOM": tells our files from other SQLite databases
SQLITE_MAGIC = b"SQLite format 3\x00"


class ModelMismatchError(SessionError):
    """The session was made with another model; its token ids mean nothing to this one.

    Attributes:
        stored: The session's model fingerprint.
        given: The fingerprint of the model asked for.
    """

    def __init__(self, message: str, stored: dict | None = None, given: dict | None = None):
        super().__init__(message)
        self.stored = stored or {}
        self.given = given or {}


class SessionLockedError(SessionError):
    """Another process has the session open for writing."""


# -- data read back from a file -------------------------------------------------------


@dataclass
class SessionData:
    """Everything a session file holds, in memory, with no model attached.

    Exports and the ``sessions`` listing work from this alone, so they never need to
    load model weights.

    Attributes:
        tree: The whole tree (``Node.kv`` is empty).
        pieces: Per node id, the display text of each token (``"".join`` is the
            node's text).
        cursor: Id of the node the user is at.
        settings: Per-session settings.
        model: ``{"name", "source", "fingerprint"}`` of the model the tokens belong to.
        vocab: Display text of token ids that appear only as alternatives.
        created, modified: Times (seconds since the epoch) of creation and last change.
        name: The session's name (its file stem), or a title.
    """

    tree: Tree
    pieces: dict[int, list[str]]
    cursor: int
    settings: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    vocab: dict[int, str] = field(default_factory=dict)
    created: float = 0.0
    modified: float = 0.0
    name: str = ""

    @property
    def cursor_node(self) -> Node:
        """The cursor as a node (the root if the id is unknown)."""
        return self.tree.nodes.get(self.cursor, self.tree.root)

    def text(self, node: Node) -> str:
        """One node's own text."""
        return "".join(self.pieces.get(node.id, ()))

    def path_text(self, node: Node | None = None) -> str:
        """The text of the path from the root to ``node`` (default: the cursor)."""
        node = node if node is not None else self.cursor_node
        return "".join(self.text(item) for item in node.path())


# -- encodings ------------------------------------------------------------------------


def pack_tokens(tokens: Iterable[int]) -> bytes:
    """Token ids as little-endian uint32 (used by the KV snapshot's path hash)."""
    items = list(tokens)
    return struct.pack(f"<{len(items)}I", *items)


def pack_top(top: list[Alternative] | None) -> bytes | None:
    """Alternatives as one blob: ``k`` int32 token ids, then ``k`` float64 logprobs.

    Exact for every id below 2**31 and every float, and about a tenth the size of JSON.
    ``None`` (never measured) stays NULL; an empty list is an empty blob.
    """
    if top is None:
        return None
    ids = [int(t) for t, _ in top]
    lps = [float(lp) for _, lp in top]
    return struct.pack(f"<{len(ids)}i{len(lps)}d", *ids, *lps)


def unpack_top(blob: bytes | None) -> list[Alternative] | None:
    """Inverse of :func:`pack_top`."""
    if blob is None:
        return None
    k = len(blob) // 12
    if k * 12 != len(blob):
        raise ValueError("alternatives blob has a partial entry")
    values = struct.unpack(f"<{k}i{k}d", blob)
    return list(zip(values[:k], values[k:], strict=True))


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a session")


def to_json(value: Any) -> str:
    """JSON text for a settings, sampling or meta value."""
    return json.dumps(value, ensure_ascii=False, default=_json_default)


# -- schema and migrations ------------------------------------------------------------


def _migrate_0_to_1(conn: sqlite3.Connection) -> None:
    """Create the first schema in an empty database."""
    # One statement at a time: executescript() would commit the migration's transaction.
    for statement in (
        "CREATE TABLE session (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE nodes (
            id INTEGER PRIMARY KEY,
            parent INTEGER REFERENCES nodes(id),
            position INTEGER NOT NULL DEFAULT 0,
            origin TEXT NOT NULL,
            approx INTEGER NOT NULL DEFAULT 0,
            sampling TEXT,
            seed INTEGER,
            created REAL NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX nodes_by_parent ON nodes(parent, position)",
        """CREATE TABLE tokens (
            node INTEGER NOT NULL REFERENCES nodes(id),
            idx INTEGER NOT NULL,
            token INTEGER NOT NULL,
            piece TEXT NOT NULL,
            logprob REAL,
            top BLOB,
            PRIMARY KEY (node, idx)
        ) WITHOUT ROWID""",
        "CREATE TABLE vocab (token INTEGER PRIMARY KEY, piece TEXT NOT NULL)",
    ):
        conn.execute(statement)


# MIGRATIONS[v] turns a schema-v database into v+1. Append a function for each new
# version; never edit an old one (files in the wild were made by it).
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_migrate_0_to_1]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _migrate(conn: sqlite3.Connection, from_version: int) -> None:
    """Bring the schema up to date, all steps in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for version in range(from_version, SCHEMA_VERSION):
            MIGRATIONS[version](conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# -- locking --------------------------------------------------------------------------


class SessionLock:
    """An exclusive OS lock on ``.<session>.lock``, released when the process dies."""

    def __init__(self, session_path: Path) -> None:
        # Hidden, and never deleted: removing a lock file while another process waits
        # to open it would let two writers each lock a different file.
        self.path = session_path.with_name(f".{session_path.name}.lock")
        self.session_name = session_path.name.removesuffix(SESSION_SUFFIX)
        self._file: Any = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`SessionLockedError` naming the holder."""
        handle = open(self.path, "a+")  # noqa: SIM115 (held open while locked)
        try:
            _lock_file(handle)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise SessionLockedError(
                f"session {self.session_name!r} is in use by another "
                f"loomterm{who}; open it read-only, or close the other one first"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        """Drop the lock (the file stays: deleting it would race with a new holder)."""
        if self._file is not None:
            try:
                self._file.seek(0)
                self._file.truncate()
                _unlock_file(self._file)
            finally:
                self._file.close()
                self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None


try:
    import fcntl

    def _lock_file(handle: Any) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock_file(handle: Any) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

except ImportError:  # pragma: no cover - Windows
    import msvcrt

    def _lock_file(handle: Any) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock_file(handle: Any) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)


# -- validation -----------------------------------------------------------------------


def _damaged(path: Path, why: str) -> SessionError:
    # SQLite's reports can span lines ("*** in database main ***\nPage 5: ..."): keep
    # the message to one line, as every LoomError is.
    lines = [line.strip() for line in why.splitlines() if line.strip() and "***" not in line]
    why = "; ".join(lines) or why.strip()
    if len(why) > 160:
        why = why[:159] + "\u2026"
    return SessionError(f"{path} is not a readable loomterm session: {why}")


def _connect_read_only(path: Path) -> sqlite3.Connection:
    # mode=ro: SQLite itself refuses every write, so validation cannot touch the file.
    # With no write-ahead log beside it, the file holds everything (the last writer
    # closed cleanly), and immutable=1 keeps SQLite from creating -wal/-shm files next
    # to it. A log present means a writer is at work (or crashed): read through it.
    wal = path.with_name(path.name + "-wal")
    flags = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
    uri = f"{path.resolve().as_uri()}?{flags}"
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        raise SessionError(f"no session at {path}") from None
    except OSError as exc:
        raise _damaged(path, exc.strerror or str(exc)) from None
    if not header:
        raise _damaged(path, "the file is empty")
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        raise _damaged(path, "not an SQLite database")


def inspect(path: Path) -> int:
    """Validate ``path`` without writing to it; return its schema version.

    Raises :class:`SessionError` for a missing, empty, foreign, damaged, truncated or
    newer-schema file.
    """
    _check_header(path)
    try:
        conn = _connect_read_only(path)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if app_id != APPLICATION_ID:
                raise _damaged(path, "an SQLite database, but not a loomterm session")
            if version > SCHEMA_VERSION:
                raise SessionError(
                    f"{path.name} was written by a newer loomterm (session schema "
                    f"v{version}; this one reads up to v{SCHEMA_VERSION}); upgrade loomterm"
                )
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise _damaged(path, "damaged database (" + "; ".join(problems) + ")")
            _read(conn, path)  # every row must decode too
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise _damaged(path, f"damaged or truncated ({exc})") from None
    return version


# -- reading --------------------------------------------------------------------------


def _meta_rows(conn: sqlite3.Connection) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in conn.execute("SELECT key, value FROM session")}


def _read(conn: sqlite3.Connection, path: Path) -> SessionData:
    """Build the tree and everything else from an open connection."""
    info = _meta_rows(conn)
    if info.get("format") != "loomterm-session":
        raise _damaged(path, "its session record is missing")
    nodes: dict[int, Node] = {}
    links: list[tuple[int, int | None, int]] = []
    for row in conn.execute(
        "SELECT id, parent, position, origin, approx, sampling, seed, created, meta FROM nodes"
    ):
        node_id, parent, position, origin, approx, sampling, seed, created, meta = row
        nodes[node_id] = Node(
            id=node_id,
            origin=Origin(origin),
            approx=bool(approx),
            sampling=json.loads(sampling) if sampling is not None else None,
            seed=seed,
            created=created,
            meta=json.loads(meta),
        )
        links.append((node_id, parent, position))
    roots = [node_id for node_id, parent, _ in links if parent is None]
    if len(roots) != 1:
        raise _damaged(path, f"expected one root node, found {len(roots)}")
    for node_id, parent, _ in sorted(links, key=lambda link: (link[2], link[0])):
        if parent is None:
            continue
        if parent not in nodes:
            raise _damaged(path, f"node {node_id} hangs from missing node {parent}")
        nodes[node_id].parent = nodes[parent]
        nodes[parent].children.append(nodes[node_id])
    root = nodes[roots[0]]
    if sum(1 for _ in root.walk()) != len(nodes):
        raise _damaged(path, "some nodes are not reachable from the root")

    pieces: dict[int, list[str]] = {node_id: [] for node_id in nodes}
    for node_id, idx, token, piece, logprob, top in conn.execute(
        "SELECT node, idx, token, piece, logprob, top FROM tokens ORDER BY node, idx"
    ):
        node = nodes.get(node_id)
        if node is None or idx != len(node.tokens):
            raise _damaged(path, f"token rows of node {node_id} are out of order")
        node.tokens.append(token)
        node.logprobs.append(logprob)
        node.top.append(unpack_top(top))
        pieces[node_id].append(piece)

    tree = Tree.from_nodes(root, nodes)
    model = info.get("model") or {}
    return SessionData(
        tree=tree,
        pieces=pieces,
        cursor=int(info.get("cursor", root.id)),
        settings=info.get("settings") or {},
        model=model,
        vocab={token: piece for token, piece in conn.execute("SELECT token, piece FROM vocab")},
        created=float(info.get("created", 0.0)),
        modified=float(info.get("modified", 0.0)),
        name=path.name.removesuffix(SESSION_SUFFIX),
    )


def load(path: str | os.PathLike) -> SessionData:
    """Read a whole session without locking it or writing to it."""
    path = Path(path)
    version = inspect(path)
    if version < SCHEMA_VERSION:
        # An old file is read through a migrated copy in memory, never upgraded in place
        # by a mere reader.
        source = _connect_read_only(path)
        conn = sqlite3.connect(":memory:", isolation_level=None)
        try:
            source.backup(conn)
            _migrate(conn, version)
            return _read(conn, path)
        finally:
            source.close()
            conn.close()
    conn = _connect_read_only(path)
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        raise _damaged(path, str(exc)) from None
    finally:
        conn.close()


@dataclass
class SessionSummary:
    """One line of ``loomterm sessions``."""

    name: str
    path: Path
    model: str
    modified: float
    nodes: int
    path_tokens: int
    error: str | None = None


def summarize(path: Path) -> SessionSummary:
    """Name, model, last change, node count and cursor path length, read cheaply."""
    name = path.name.removesuffix(SESSION_SUFFIX)
    try:
        _check_header(path)
        conn = _connect_read_only(path)
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                raise _damaged(path, "not a loomterm session")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SessionError(f"newer schema v{version}")
            info = _meta_rows(conn)
            nodes = conn.execute("SELECT count(*) FROM nodes").fetchone()[0]
            cursor = int(info.get("cursor", 0))
            path_tokens = conn.execute(
                """
                WITH RECURSIVE up(id) AS (
                    SELECT ? UNION ALL SELECT nodes.parent FROM nodes JOIN up ON nodes.id = up.id
                    WHERE nodes.parent IS NOT NULL
                )
                SELECT count(*) FROM tokens WHERE node IN (SELECT id FROM up)
                """,
                (cursor,),
            ).fetchone()[0]
        finally:
            conn.close()
    except (SessionError, sqlite3.DatabaseError, ValueError) as exc:
        return SessionSummary(name, path, "?", _mtime(path), 0, 0, error=str(exc))
    model = info.get("model") or {}
    return SessionSummary(
        name=name,
        path=path,
        model=str(model.get("name") or model.get("source") or "?"),
        modified=float(info.get("modified") or _mtime(path)),
        nodes=nodes,
        path_tokens=path_tokens,
    )


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# -- writing --------------------------------------------------------------------------


class SessionStore:
    """A session file open for writing: holds the lock and one connection.

    Every public method is one transaction and is safe to call from any thread (the
    engine streams tokens from a worker thread while the UI moves the cursor).
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, lock: SessionLock) -> None:
        self.path = path
        self._conn = conn
        self._lock = lock
        self._mutex = threading.RLock()
        self._known_vocab: set[int] | None = None

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike) -> SessionStore:
        """Validate, lock, migrate if needed, and open an existing session for writing."""
        path = Path(path)
        version = inspect(path)  # read-only: nothing is written before this passes
        lock = SessionLock(path)
        lock.acquire()
        try:
            if version < SCHEMA_VERSION:
                backup = path.with_name(f"{path.name}.v{version}.bak")
                shutil.copy2(path, backup)
            conn = cls._connect(path)
            if version < SCHEMA_VERSION:
                _migrate(conn, version)
        except sqlite3.DatabaseError as exc:
            lock.release()
            raise _damaged(path, str(exc)) from None
        except BaseException:
            lock.release()
            raise
        return cls(path, conn, lock)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        *,
        model: dict[str, Any],
        settings: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> SessionStore:
        """Create a new, empty session file (no nodes yet) and open it for writing.

        An existing session is replaced only with ``overwrite``; a file that is not a
        loomterm session is never replaced.
        """
        path = Path(path)
        if path.exists():
            if not overwrite:
                raise SessionError(f"a session already exists at {path}")
            inspect(path)  # refuse to clobber anything that is not ours
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = SessionLock(path)
        lock.acquire()
        try:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.unlink(missing_ok=True)
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                _migrate(conn, 0)
                now = time.time()
                conn.executemany(
                    "INSERT INTO session(key, value) VALUES (?, ?)",
                    [
                        ("format", to_json("loomterm-session")),
                        ("created", to_json(now)),
                        ("modified", to_json(now)),
                        ("cursor", to_json(0)),
                        ("settings", to_json(settings or {})),
                        ("model", to_json(model)),
                    ],
                )
            finally:
                conn.close()
            # A stale write-ahead log beside the old file would be replayed into the new
            # one: remove it while we hold the lock.
            for suffix in ("-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
            os.replace(tmp, path)
            conn = cls._connect(path)
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

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: every commit survives an application crash; only a power
        # cut may drop the last few, and the file stays consistent either way.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

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
                self._conn = None  # type: ignore[assignment]
                self._lock.release()

    @property
    def closed(self) -> bool:
        return self._conn is None

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions -----------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic change; also stamps the session's last-change time."""
        with self._mutex:
            if self._conn is None:
                raise SessionError(f"session {self.path.name} is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute(
                    "UPDATE session SET value = ? WHERE key = 'modified'", (to_json(time.time()),)
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
                self._set(conn, "model", model)
                conn.execute("DELETE FROM vocab")
                self._known_vocab = None
            conn.execute("DELETE FROM tokens")
            conn.execute("DELETE FROM nodes")
            for node in tree.root.walk():  # parents before children
                self._insert_node(conn, node)
                self._insert_tokens(conn, node, 0, pieces(node))
            self._set(conn, "cursor", cursor.id)

    def add_node(self, node: Node, pieces: list[str]) -> None:
        """A new node (with whatever tokens it already has)."""
        with self.transaction() as conn:
            self._insert_node(conn, node)
            self._insert_tokens(conn, node, 0, pieces)
            self._renumber_children(conn, node.parent)

    def append_tokens(self, node: Node, start: int, end: int, pieces: list[str]) -> None:
        """Tokens ``start:end`` of ``node`` were added since the last write."""
        with self.transaction() as conn:
            self._insert_tokens(conn, node, start, pieces, end)

    def rewrite_node(self, node: Node, pieces: list[str]) -> None:
        """Replace a node's row and all its tokens (after an edit that was not an append)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM tokens WHERE node = ?", (node.id,))
            self._update_node(conn, node)
            self._insert_tokens(conn, node, 0, pieces)

    def split(self, head: Node, head_pieces: list[str], tail_pieces: list[str]) -> None:
        """``head`` was cut from the front of its only child (the tail keeps its id)."""
        tail = head.children[0]
        with self.transaction() as conn:
            self._insert_node(conn, head)
            conn.execute("DELETE FROM tokens WHERE node = ?", (tail.id,))
            self._insert_tokens(conn, head, 0, head_pieces)
            self._update_node(conn, tail)
            self._insert_tokens(conn, tail, 0, tail_pieces)
            self._renumber_children(conn, head.parent)

    def update_node(self, node: Node) -> None:
        """A node's flags, meta, sampling or place among its siblings changed."""
        with self.transaction() as conn:
            self._update_node(conn, node)
            self._renumber_children(conn, node.parent)

    def set_cursor(self, node: Node) -> None:
        """The user moved to ``node``."""
        with self.transaction() as conn:
            self._set(conn, "cursor", node.id)

    def set_settings(self, settings: dict[str, Any]) -> None:
        """Replace the per-session settings."""
        with self.transaction() as conn:
            self._set(conn, "settings", settings)

    def set_model(self, model: dict[str, Any]) -> None:
        """Record the model (name, source, fingerprint) the tokens belong to."""
        with self.transaction() as conn:
            self._set(conn, "model", model)

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
                    row[0] for row in self._conn.execute("SELECT token FROM vocab")
                }
            return self._known_vocab

    def read(self) -> SessionData:
        """Everything in the file, read through the writer's own connection."""
        with self._mutex:
            return _read(self._conn, self.path)

    # -- row helpers ------------------------------------------------------------------
    @staticmethod
    def _set(conn: sqlite3.Connection, key: str, value: Any) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO session(key, value) VALUES (?, ?)", (key, to_json(value))
        )

    @staticmethod
    def _node_row(node: Node) -> tuple:
        parent = node.parent
        return (
            parent.id if parent is not None else None,
            parent.children.index(node) if parent is not None else 0,
            Origin(node.origin).value,
            int(bool(node.approx)),
            to_json(node.sampling) if node.sampling is not None else None,
            node.seed,
            float(node.created),
            to_json(node.meta or {}),
            node.id,
        )

    def _insert_node(self, conn: sqlite3.Connection, node: Node) -> None:
        conn.execute(
            "INSERT INTO nodes(parent, position, origin, approx, sampling, seed, created, meta, id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            self._node_row(node),
        )

    def _update_node(self, conn: sqlite3.Connection, node: Node) -> None:
        conn.execute(
            "UPDATE nodes SET parent = ?, position = ?, origin = ?, approx = ?, sampling = ?,"
            " seed = ?, created = ?, meta = ? WHERE id = ?",
            self._node_row(node),
        )

    @staticmethod
    def _renumber_children(conn: sqlite3.Connection, parent: Node | None) -> None:
        if parent is None:
            return
        conn.executemany(
            "UPDATE nodes SET parent = ?, position = ? WHERE id = ?",
            [(parent.id, i, child.id) for i, child in enumerate(parent.children)],
        )

    @staticmethod
    def _insert_tokens(
        conn: sqlite3.Connection,
        node: Node,
        start: int,
        pieces: list[str],
        end: int | None = None,
    ) -> None:
        end = len(node.tokens) if end is None else end
        if len(pieces) != end - start:
            raise ValueError(f"{len(pieces)} pieces for {end - start} tokens")
        conn.executemany(
            "INSERT INTO tokens(node, idx, token, piece, logprob, top) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    node.id,
                    i,
                    int(node.tokens[i]),
                    pieces[i - start],
                    None if node.logprobs[i] is None else float(node.logprobs[i]),
                    pack_top(node.top[i]),
                )
                for i in range(start, end)
            ],
        )


def write_session(
    path: str | os.PathLike, data: SessionData, *, overwrite: bool = False
) -> SessionStore:
    """Create a session file holding ``data`` (used by import) and return it, open."""
    store = SessionStore.create(path, model=data.model, settings=data.settings, overwrite=overwrite)
    try:
        store.write_tree(data.tree, lambda node: data.pieces.get(node.id, []), data.cursor_node)
        store.add_vocab(data.vocab)
    except BaseException:
        store.close()
        raise
    return store
