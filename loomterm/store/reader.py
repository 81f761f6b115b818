"""Reading a session file without ever writing to it: validation, and rows back to a tree.

A file is validated through a read-only connection before anything may write to it; a
missing, empty, foreign, damaged, truncated or newer-schema file raises
:class:`~loomterm.errors.SessionError` (one line) and is left untouched.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from loomterm.errors import SessionError
from loomterm.store import schema
from loomterm.store.data import Caret, SessionData, Typed
from loomterm.store.encoding import unpack_top
from loomterm.store.errors import damaged
from loomterm.store.guard import check_schema, harden
from loomterm.store.journal import apply, read_lines
from loomterm.store.schema import SESSION_SUFFIX
from loomterm.tree import Node, Origin, Tree


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write to ``path``, nor create files beside it."""
    # mode=ro: SQLite itself refuses every write, so validation cannot touch the file.
    # With no write-ahead log beside it, the file holds everything (the last writer
    # closed cleanly), and immutable=1 keeps SQLite from creating -wal/-shm files next
    # to it. A log present means a writer is at work (or crashed): read through it.
    wal = path.with_name(path.name + "-wal")
    flags = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
    uri = f"{path.resolve().as_uri()}?{flags}"
    return harden(sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False))


def check_header(path: Path) -> None:
    """Refuse a missing, unreadable, empty or non-SQLite file before SQLite opens it."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        raise SessionError(f"no session at {path}") from None
    except OSError as exc:
        raise damaged(path, exc.strerror or str(exc)) from None
    if not header:
        raise damaged(path, "the file is empty")
    if not header.startswith(schema.SQLITE_MAGIC) or len(header) < 100:
        raise damaged(path, "not an SQLite database")


def check_file(path: Path) -> int:
    """Validate ``path`` without writing to it; return its schema version.

    Raises :class:`SessionError` for a missing, empty, foreign, damaged, truncated or
    newer-schema file, and for one whose schema is not exactly loomterm's (a trigger,
    a view, anything else that could run: :mod:`loomterm.store.guard`).
    """
    return _read_checked(path)[0]


def _read_checked(path: Path) -> tuple[int, SessionData]:
    """Validate ``path`` read-only and read it, through one connection: its schema
    version and its contents (an older file's as migrated in memory)."""
    check_header(path)
    try:
        conn = connect_read_only(path)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if app_id != schema.APPLICATION_ID:
                raise damaged(path, "an SQLite database, but not a loomterm session")
            if version > schema.SCHEMA_VERSION:
                raise SessionError(
                    f"{path.name} was written by a newer loomterm (session schema "
                    f"v{version}; this one reads up to v{schema.SCHEMA_VERSION}); upgrade loomterm"
                )
            check_schema(conn, path, version)  # before any row is read
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise damaged(path, "damaged database (" + "; ".join(problems) + ")")
            if version < schema.SCHEMA_VERSION:
                return version, _read_migrated(conn, path, version)
            return version, read_rows(conn, path)  # every row must decode too
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise damaged(path, f"damaged or truncated ({exc})") from None
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
        # A row that does not decode (bad JSON, an unknown origin...): one line.
        raise damaged(path, f"a row does not decode ({type(exc).__name__}: {exc})") from None


def _read_migrated(source: sqlite3.Connection, path: Path, version: int) -> SessionData:
    """An old file read through a migrated copy in memory, never upgraded in place by
    a mere reader."""
    conn = harden(sqlite3.connect(":memory:", isolation_level=None))
    try:
        source.backup(conn)
        schema.migrate(conn, version)
        return read_rows(conn, path)
    finally:
        conn.close()


# -- reading --------------------------------------------------------------------------


def meta_rows(conn: sqlite3.Connection) -> dict[str, Any]:
    """The ``session`` table as a dict of decoded JSON values."""
    return {key: json.loads(value) for key, value in conn.execute("SELECT key, value FROM session")}


def read_rows(conn: sqlite3.Connection, path: Path) -> SessionData:
    """Build the tree and everything else from an open connection."""
    info = meta_rows(conn)
    if info.get("format") != "loomterm-session":
        raise damaged(path, "its session record is missing")
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
        raise damaged(path, f"expected one root node, found {len(roots)}")
    for node_id, parent, _ in sorted(links, key=lambda link: (link[2], link[0])):
        if parent is None:
            continue
        if parent not in nodes:
            raise damaged(path, f"node {node_id} hangs from missing node {parent}")
        nodes[node_id].parent = nodes[parent]
        nodes[parent].children.append(nodes[node_id])
    root = nodes[roots[0]]
    if sum(1 for _ in root.walk()) != len(nodes):
        raise damaged(path, "some nodes are not reachable from the root")

    pieces: dict[int, list[str]] = {node_id: [] for node_id in nodes}
    for node_id, idx, token, piece, logprob, top in conn.execute(
        "SELECT node, idx, token, piece, logprob, top FROM tokens ORDER BY node, idx"
    ):
        node = nodes.get(node_id)
        if node is None or idx != len(node.tokens):
            raise damaged(path, f"token rows of node {node_id} are out of order")
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
        contexts=info.get("contexts") or {},
        model=model,
        vocab={token: piece for token, piece in conn.execute("SELECT token, piece FROM vocab")},
        created=float(info.get("created", 0.0)),
        modified=float(info.get("modified", 0.0)),
        name=path.name.removesuffix(SESSION_SUFFIX),
        models=info.get("models") or {},
        model_state=info.get("model_state") or {},
        caret=Caret.from_json(info.get("caret")),
        typed=Typed.from_json(info.get("typed")),
    )


def load(path: str | os.PathLike) -> SessionData:
    """Read a whole session without locking it or writing to it (validated as
    :func:`check_file` does, through the same read-only connection), with the changes
    a journal keeps for it applied in memory (``loomterm.store.journal``: its file
    could not take them yet)."""
    path = Path(path)
    data = _read_checked(path)[1]
    lines = read_lines(path)
    if lines:
        apply(data, lines)
    return data
