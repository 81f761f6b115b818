"""One line of ``loomterm sessions`` per file, read cheaply: :func:`summarize`."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from loomterm.errors import SessionError
from loomterm.store import schema
from loomterm.store.errors import damaged
from loomterm.store.fields import FieldError
from loomterm.store.guard import check_schema
from loomterm.store.reader import check_header, check_info, connect_read_only, meta_rows
from loomterm.store.schema import SESSION_SUFFIX


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
        check_header(path)
        conn = connect_read_only(path)
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != schema.APPLICATION_ID:
                raise damaged(path, "not a loomterm session")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > schema.SCHEMA_VERSION:
                raise SessionError(f"newer schema v{version}")
            check_schema(conn, path, version)  # nothing in the file runs, even here
            info = check_info(meta_rows(conn))
            nodes = conn.execute("SELECT count(*) FROM nodes").fetchone()[0]
            cursor = info.get("cursor", 0)
            path_tokens = conn.execute(
                """
                WITH RECURSIVE up(id) AS (
                    SELECT ? UNION SELECT nodes.parent FROM nodes JOIN up ON nodes.id = up.id
                    WHERE nodes.parent IS NOT NULL
                )
                SELECT count(*) FROM tokens WHERE node IN (SELECT id FROM up)
                """,
                (cursor,),
            ).fetchone()[0]
        finally:
            conn.close()
    except UnicodeDecodeError:  # a text value that is not UTF-8
        return SessionSummary(
            name, path, "?", _mtime(path), 0, 0, error="a text value is not UTF-8"
        )
    except (SessionError, sqlite3.DatabaseError, FieldError) as exc:
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
