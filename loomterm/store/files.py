"""The session file itself, below the writer: its hardened writing connection, a new
file built whole before it is renamed into place, and how a file is told from another
that took its path.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loomterm.store import schema
from loomterm.store.encoding import to_json
from loomterm.store.errors import damaged
from loomterm.store.guard import check_schema, harden


def connect(path: Path, version: int | None = None) -> sqlite3.Connection:
    """The writing connection, hardened (``store.guard``); with ``version``, the
    file's schema is checked against it before anything is written."""
    conn = harden(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
    try:
        if version is not None:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            if found != version:
                raise damaged(path, "it changed while being opened")
            check_schema(conn, path, version)
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: every commit survives an application crash; only a
        # power cut may drop the last few, and the file stays consistent either way.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def build(
    tmp: Path,
    model: dict[str, Any],
    settings: dict[str, Any],
    fill: Callable[[Any], None] | None,
    store_class: type,
) -> None:
    """Make a complete session file at ``tmp`` (a new file nobody else opens); ``fill``
    writes into it through a ``store_class`` (the writer) opened on it."""
    conn = harden(sqlite3.connect(tmp, isolation_level=None, check_same_thread=False))
    # No rollback journal: a failed build is thrown away whole (atomic_path), and the
    # file is synced once before it is renamed into place.
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    building = store_class(tmp, conn, None)
    try:
        schema.migrate(conn, 0)
        now = time.time()
        conn.executemany(
            "INSERT INTO session(key, value) VALUES (?, ?)",
            [
                ("format", to_json("loomterm-session")),
                ("created", to_json(now)),
                ("modified", to_json(now)),
                ("cursor", to_json(0)),
                ("settings", to_json(settings)),
                ("model", to_json(model)),
            ],
        )
        if fill is not None:
            fill(building)
    finally:
        building.close()


def remove_leftovers(path: Path) -> None:
    """Delete the temporary files of earlier creates of ``path`` that never finished
    (a process killed midway): while this process holds the lock, nobody else is
    building one."""
    for leftover in path.parent.glob(f".{glob_escape(path.name)}.????????.tmp"):
        try:
            leftover.unlink()
        except OSError:
            pass  # someone else's file we may not remove: harmless, it is hidden


def remove_stale_log(path: Path) -> None:
    """Remove the write-ahead log files beside ``path``: a stale log beside an old
    file would be replayed into a new one (call it holding the lock)."""
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters taken literally."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def identity(path: Path) -> tuple[int, int] | None:
    """The device and inode of the file at ``path`` (None if there is none): another
    file put at the same path has another identity."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino
