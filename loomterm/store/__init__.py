"""The on-disk session: one loom per SQLite file (this package's public names).

Standard library only (``sqlite3``, ``fcntl``); nothing here knows about torch or the UI.
Each module owns one thing:

- :mod:`~loomterm.store.schema`: the tables, schema version, file marks and migrations;
- :mod:`~loomterm.store.encoding`: packing token ids, alternatives and JSON values;
- :mod:`~loomterm.store.data`: :class:`SessionData`, a session in memory (and
  :class:`Caret`, where the editor's caret was, and :class:`Typed`, text typed before
  the model read it);
- :mod:`~loomterm.store.errors`: the errors raised, and the damaged-file message;
- :mod:`~loomterm.store.lock`: the writer's exclusive lock;
- :mod:`~loomterm.store.reader`: validating a file read-only (:func:`check_file`) and
  reading it back (:func:`load`);
- :mod:`~loomterm.store.summary`: the cheap one-line summary (:func:`summarize`);
- :mod:`~loomterm.store.writer`: :class:`SessionStore`, the writer, and
  :func:`write_session`.

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

The schema constants are re-exported here for reading; to patch them (in a test),
patch :mod:`loomterm.store.schema`, which every module reads them from.
"""

from __future__ import annotations

from loomterm.store.data import Caret, SessionData, Typed, hoisted
from loomterm.store.encoding import pack_tokens, pack_top, to_json, unpack_top
from loomterm.store.errors import ModelMismatchError, SessionLockedError
from loomterm.store.lock import SessionLock
from loomterm.store.reader import check_file, load
from loomterm.store.schema import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    SESSION_SUFFIX,
    SQLITE_MAGIC,
)
from loomterm.store.summary import SessionSummary, summarize
from loomterm.store.writer import SessionStore, write_session

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SESSION_SUFFIX",
    "SQLITE_MAGIC",
    "Caret",
    "ModelMismatchError",
    "SessionData",
    "Typed",
    "SessionLock",
    "SessionLockedError",
    "SessionStore",
    "SessionSummary",
    "check_file",
    "hoisted",
    "load",
    "pack_tokens",
    "pack_top",
    "summarize",
    "to_json",
    "unpack_top",
    "write_session",
]
