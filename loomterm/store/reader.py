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
from loomterm.store import fields, schema
from loomterm.store.data import Caret, SessionData, Typed, hoisted
from loomterm.store.encoding import unpack_top
from loomterm.store.errors import damaged
from loomterm.store.guard import check_schema, harden
from loomterm.store.journal import apply, read_lines
from loomterm.store.schema import SESSION_SUFFIX
from loomterm.tree import Node, Tree


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
    except UnicodeDecodeError:  # a text column holding bytes that are not UTF-8
        raise damaged(path, "a text value is not UTF-8") from None
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
    except sqlite3.DatabaseError as exc:  # its tables are not those of its version
        raise damaged(path, f"cannot be read as schema v{version} ({exc})") from None
    finally:
        conn.close()


# -- reading --------------------------------------------------------------------------


def meta_rows(conn: sqlite3.Connection) -> dict[str, Any]:
    """The ``session`` table as a dict of decoded JSON values (a value that is not JSON
    raises :class:`~loomterm.store.fields.FieldError`)."""
    info = {}
    for key, value in conn.execute("SELECT key, value FROM session"):
        info[key] = _json(value, f"session value {str(key)[:40]!r}")
    return info


def _json(text: Any, field: str) -> Any:
    """A JSON column's value decoded."""
    if not isinstance(text, str):
        raise fields.FieldError(f"{field} must be JSON text, not {type(text).__name__}")
    try:
        return json.loads(text)
    except ValueError:
        raise fields.FieldError(f"{field} is not JSON") from None
    except RecursionError:
        raise fields.FieldError(f"{field} is nested too deeply") from None


def check_info(info: dict[str, Any]) -> dict[str, Any]:
    """The ``session`` table's values, checked: what :class:`SessionData` is built from
    (``caret`` and ``model_state`` are conveniences, tolerated as anything)."""
    if info.get("format") != "loomterm-session":
        raise fields.FieldError("its session record is missing")
    fields.node_id(info.get("cursor", 0), "the cursor")
    for key in ("created", "modified"):
        fields.moment(info.get(key, 0.0), f"the session's {key} time")
    for key in ("settings", "contexts", "model", "models", "model_state"):
        fields.table(info.get(key) or {}, f"the session's {key}")
    for key, record in (info.get("models") or {}).items():
        fields.table(record, f"the session's models[{key[:40]!r}]")
    return info


def _node_row(row: tuple) -> tuple[Node, Any, Any]:
    """One ``nodes`` row as a node (not linked yet), its parent id and its position."""
    node_id, parent, position, origin, approx, sampling, seed, created, meta = row
    at = f"node {node_id}"
    fields.node_id(node_id, "a node's id")
    if parent is not None:
        fields.node_id(parent, f"{at}: parent")
    if not fields.is_whole(position):
        raise fields.FieldError(f"{at}: position must be a whole number")
    if approx not in (0, 1):
        raise fields.FieldError(f"{at}: approx must be 0 or 1")
    node = Node(
        id=node_id,
        origin=fields.origin(origin, f"{at}: origin"),
        approx=bool(approx),
        sampling=fields.sampling(
            _json(sampling, f"{at}: sampling") if sampling is not None else None,
            f"{at}: sampling",
        ),
        seed=fields.seed(seed, f"{at}: seed"),
        created=fields.moment(created, f"{at}: created"),
        meta=fields.meta(_json(meta, f"{at}: meta"), f"{at}: meta"),
    )
    return node, parent, position


def _token_row(row: tuple) -> tuple[int, int, int, str, float | None, Any]:
    """One ``tokens`` row, checked, with its alternatives unpacked."""
    node_id, idx, token, piece, logprob, top = row
    at = f"node {node_id}: token {idx}"
    fields.token_id(token, at)
    if not isinstance(piece, str):
        raise fields.FieldError(f"{at}: its text must be text, not {type(piece).__name__}")
    fields.logprob(logprob, f"{at}: logprob")
    if top is not None and not isinstance(top, bytes):
        raise fields.FieldError(f"{at}: alternatives must be a blob, not {type(top).__name__}")
    try:
        alternatives = unpack_top(top)
    except ValueError:
        raise fields.FieldError(f"{at}: alternatives blob is cut short") from None
    for alt, alt_logprob in alternatives or ():
        fields.token_id(alt, f"{at}: an alternative")
        fields.logprob(alt_logprob, f"{at}: an alternative's logprob")
    return node_id, idx, token, piece, logprob, alternatives


def read_rows(conn: sqlite3.Connection, path: Path) -> SessionData:
    """Build the tree and everything else from an open connection; a row holding the
    wrong kind of value (:mod:`loomterm.store.fields`) is a damaged file, in one line."""
    try:
        return _read_rows(conn, path)
    except fields.FieldError as exc:
        raise damaged(path, str(exc)) from None


def _read_rows(conn: sqlite3.Connection, path: Path) -> SessionData:
    info = check_info(meta_rows(conn))
    nodes: dict[int, Node] = {}
    links: list[tuple[int, int | None, int]] = []
    for row in conn.execute(
        "SELECT id, parent, position, origin, approx, sampling, seed, created, meta FROM nodes"
    ):
        node, parent, position = _node_row(row)
        nodes[node.id] = node
        links.append((node.id, parent, position))
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
    for row in conn.execute(
        "SELECT node, idx, token, piece, logprob, top FROM tokens ORDER BY node, idx"
    ):
        node_id, idx, token, piece, logprob, top = _token_row(row)
        node = nodes.get(node_id)
        if node is None or idx != len(node.tokens):
            raise damaged(path, f"token rows of node {node_id} are out of order")
        node.tokens.append(token)
        node.logprobs.append(logprob)
        node.top.append(top)
        pieces[node_id].append(piece)

    tree = Tree.from_nodes(root, nodes)
    vocab = {}
    for token, piece in conn.execute("SELECT token, piece FROM vocab"):
        if not isinstance(piece, str):
            raise fields.FieldError(f"vocab entry {token}: its text must be text")
        vocab[fields.token_id(token, "a vocab entry")] = piece
    return SessionData(
        tree=tree,
        pieces=pieces,
        cursor=info.get("cursor", root.id),
        settings=info.get("settings") or {},
        contexts=info.get("contexts") or {},
        model=info.get("model") or {},
        vocab=vocab,
        created=float(info.get("created", 0.0)),
        modified=float(info.get("modified", 0.0)),
        name=path.name.removesuffix(SESSION_SUFFIX),
        models=info.get("models") or {},
        model_state=info.get("model_state") or {},
        caret=Caret.from_json(info.get("caret")),
        typed=Typed.from_json(info.get("typed")),
        hoist=_hoist(info.get("hoist"), tree),
    )


def _hoist(value: Any, tree: Tree) -> int | None:
    """The stored hoist, when it names a node of ``tree`` (else None: dropped)."""
    node = hoisted(value)
    return node if node is not None and node in tree.nodes else None


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
