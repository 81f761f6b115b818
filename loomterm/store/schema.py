"""The session file's format: its tables, schema version, marks and migrations.

Layout (schema version 1, kept in ``PRAGMA user_version``; the file is marked as ours by
``PRAGMA application_id``)::

    session(key TEXT PRIMARY KEY, value TEXT)      -- JSON values: format, created,
                                                    -- modified, cursor, settings,
                                                    -- model {name, source, fingerprint},
                                                    -- models (key to record), model_state
                                                    -- {active, attached}: a key added
                                                    -- without a new version (an older
                                                    -- reader ignores it, and a file
                                                    -- without it reads as {}); caret
                                                    -- {node, char}: the same (a file
                                                    -- without it: the caret at the end);
                                                    -- hoist {node}: the same, a view (the
                                                    -- node the editor works inside)
    nodes(id, parent, position, origin, approx, sampling, seed, created, meta)
                                                    -- one row per node; ``position`` is
                                                    -- the order among its siblings
    tokens(node, idx, token, piece, logprob, top)   -- one row per token; ``piece`` is
                                                    -- the token's display text, ``top``
                                                    -- the packed alternatives (see
                                                    -- ``loomterm.store.encoding``)
    vocab(token, piece)                             -- display text of alternative ids

The other store modules read :data:`SCHEMA_VERSION` and :data:`MIGRATIONS` from this
module when they run (``schema.SCHEMA_VERSION``), never copy them at import time, so a
test that patches them here patches them everywhere.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

SESSION_SUFFIX = ".loom"
SCHEMA_VERSION = 1
APPLICATION_ID = 0x4C4F4F4D  # "LOOM": tells our files from other SQLite databases
SQLITE_MAGIC = b"SQLite format 3\x00"


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


def migrate(conn: sqlite3.Connection, from_version: int) -> None:
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
