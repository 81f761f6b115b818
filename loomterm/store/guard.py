"""A session file is data: what its schema may hold, and SQLite opened defensively.

A ``.loom`` file is an SQLite database, and an SQLite database can carry code in its
schema: a trigger runs on the next insert, a view runs on a read, a default or an
index expression calls functions. A session file comes from anywhere (a download, a
shared folder), so nothing in it may run. Two defences:

- :func:`check_schema`: the file's ``sqlite_master`` must be exactly the schema
  loomterm itself makes for the file's version (the tables, indexes and their SQL,
  word for word); a trigger, a view, an unknown table or index, or an altered
  ``CREATE`` statement is refused in one line naming the file, before any row is read
  or written.
- :func:`harden`: every connection to a session file turns off what a hostile schema
  could use (``PRAGMA trusted_schema=OFF``; on Python 3.12+ also SQLite's defensive
  mode, and triggers and views, through ``Connection.setconfig``).

Standard library only.
"""

from __future__ import annotations

import sqlite3
from functools import cache
from pathlib import Path

from loomterm.store import schema
from loomterm.store.errors import damaged

# What a schema row is compared on: (type, name, table, SQL text).
SchemaRow = tuple[str, str, str, str | None]

# SQLite's own switches (sqlite3.h), named by Python 3.12+; off where a build lacks them.
_OFF = (
    "SQLITE_DBCONFIG_TRUSTED_SCHEMA",
    "SQLITE_DBCONFIG_ENABLE_TRIGGER",
    "SQLITE_DBCONFIG_ENABLE_VIEW",
    "SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION",
)
_ON = ("SQLITE_DBCONFIG_DEFENSIVE",)


def harden(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Make ``conn`` run nothing a file's schema holds; returns it.

    ``trusted_schema=OFF`` keeps functions with side effects out of a schema's
    defaults, views, triggers and index expressions (SQLite 3.31+). Where Python has
    ``setconfig`` (3.12+), defensive mode also forbids writes to the schema tables and
    other corruption routes, and triggers and views are switched off outright (a
    session file has neither).
    """
    conn.execute("PRAGMA trusted_schema = OFF")
    setconfig = getattr(conn, "setconfig", None)
    if setconfig is not None:
        for names, value in ((_OFF, False), (_ON, True)):
            for name in names:
                option = getattr(sqlite3, name, None)
                if option is None:
                    continue
                try:
                    setconfig(option, value)
                except sqlite3.Error:  # an older SQLite without this switch
                    pass
    return conn


@cache
def expected_schema(version: int) -> frozenset[SchemaRow]:
    """The ``sqlite_master`` rows loomterm's own migrations make for schema ``version``
    (built in memory from :data:`loomterm.store.schema.MIGRATIONS`, once per version)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("BEGIN")
        for step in schema.MIGRATIONS[:version]:
            step(conn)
        conn.execute("COMMIT")
        return frozenset(_rows(conn))
    finally:
        conn.close()


def _rows(conn: sqlite3.Connection) -> list[SchemaRow]:
    return [
        (str(kind), str(name), str(table), sql)
        for kind, name, table, sql in conn.execute(
            "SELECT type, name, tbl_name, sql FROM main.sqlite_master"
        )
    ]


def check_schema(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Refuse ``path`` unless its schema is exactly loomterm's for ``version``.

    Raises :class:`~loomterm.errors.SessionError` (one line, naming the file and the
    first thing that does not belong) for a trigger, a view, a table or index that
    loomterm does not make, or a ``CREATE`` statement that differs from loomterm's.
    """
    if not 0 <= version <= schema.SCHEMA_VERSION:
        return  # a newer file is refused by its version, an odd one by its rows
    expected = expected_schema(version)
    found = set(_rows(conn))
    if found == expected:
        return
    known = {(kind, name) for kind, name, _, _ in expected}
    for kind, name, _, _ in sorted(found - expected, key=lambda row: row[:2]):
        if kind in ("trigger", "view"):
            raise damaged(path, f"it holds a {kind} ({name!r}); a session file holds none")
        if (kind, name) not in known:
            raise damaged(path, f"unknown {kind} {name!r} in its schema")
        raise damaged(path, f"the {kind} {name!r} is not defined as loomterm defines it")
    missing = sorted(name for _, name, _, _ in expected - found)
    raise damaged(path, f"its schema lacks {', '.join(map(repr, missing))}")
