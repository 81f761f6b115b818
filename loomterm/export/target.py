"""Where an export may write: never over a session, never over a file unasked.

An export is a copy of a session in another form; writing it over the session it came
from (``loomterm export story -o story.loom``), or over any other session, would lose
the tree. A session is known by its content (SQLite's header and loomterm's mark or
tables), whatever its name or folder, and also by its name (``.loom``, and the
write-ahead log, shared memory and lock files beside one). Any other file that exists
is replaced only when asked (``--force``, or the export dialog's confirmation). The
write itself is atomic (:mod:`loomterm.atomic`).
"""

from __future__ import annotations

import os
import sqlite3
import struct
from pathlib import Path

from loomterm import atomic
from loomterm.export.errors import ExportError
from loomterm.store import APPLICATION_ID, SESSION_SUFFIX, SQLITE_MAGIC

# Tables that make an SQLite file a loomterm session even without loomterm's mark (a
# file whose header was rewritten, or written by hand).
_SESSION_TABLES = {"session", "nodes", "tokens"}
_BESIDE_A_SESSION = ("-wal", "-shm", "-journal", ".lock")


class TargetExists(ExportError):
    """The export's file exists and replacing it was not asked for.

    Attributes:
        path: The file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__(f"{os.fspath(path)} already exists")
        self.path = os.fspath(path)


def is_session_file(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a loomterm session (by content: an SQLite database
    marked as loomterm's, or holding its tables), whatever it is called."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError:
        return False
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        return False
    if struct.unpack(">I", header[68:72])[0] == APPLICATION_ID:
        return True
    try:
        uri = f"{Path(path).resolve().as_uri()}?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True)
        try:
            conn.execute("PRAGMA trusted_schema = OFF")
            names = {
                row[0]
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        finally:
            conn.close()
    except sqlite3.Error:
        return True  # an SQLite file we cannot read: not ours to write over either
    return _SESSION_TABLES <= names


def _names_a_session(path: Path) -> bool:
    """A session's name, or the name of a file SQLite or loomterm keeps beside one."""
    name = path.name
    if name.endswith(SESSION_SUFFIX):
        return True
    for suffix in _BESIDE_A_SESSION:
        if name.endswith(SESSION_SUFFIX + suffix):
            return True
    return False


def check_target(path: str | os.PathLike, force: bool = False) -> Path:
    """Refuse ``path`` as an export's file; return the file that would be written.

    Raises :class:`ExportError` (one line) for a session (by content, through any
    symbolic link) or a session's name, a folder, and :class:`TargetExists` for any
    other existing regular file unless ``force`` (a device or a pipe is written into).
    """
    given = Path(path)
    real = Path(os.path.realpath(given))
    for candidate in dict.fromkeys((given, real)):
        if _names_a_session(candidate):
            raise ExportError(
                f"{os.fspath(path)} is a session file's name; an export never writes "
                "over a session: choose another file"
            )
    if real.is_dir():
        raise ExportError(f"{os.fspath(path)} is a folder: name a file to export to")
    if not real.exists():
        return real
    if not real.is_file():  # a device or a pipe (-o /dev/null): written into, nothing lost
        return real
    if is_session_file(real):
        raise ExportError(
            f"{os.fspath(path)} is a loomterm session; an export never writes over a "
            "session: choose another file"
        )
    if not force:
        raise TargetExists(path)
    return real


def write_export(path: str | os.PathLike, text: str, force: bool = False) -> None:
    """Write an export's ``text`` to ``path`` all at once, after :func:`check_target`:
    on any failure the old file (if any) is untouched, no temporary file is left, and
    :class:`ExportError` says why in one line."""
    check_target(path, force)
    try:
        atomic.write_atomic(path, text)
    except OSError as exc:
        raise ExportError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None
