"""The writer's lock on a session: an exclusive OS lock on ``.<file>.lock``.

The operating system drops the lock when the process dies, so a crash never leaves a
session locked. A second writer is refused; readers need no lock.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loomterm.store.errors import SessionLockedError
from loomterm.store.schema import SESSION_SUFFIX


class SessionLock:
    """An exclusive OS lock on ``.<session>.lock``, released when the process dies."""

    def __init__(self, session_path: Path) -> None:
        # Beside the file itself, found by its resolved path (symbolic links followed,
        # ``..`` removed): the same session opened by a link and by its real path takes
        # the same lock. Case needs nothing more: on a file system that ignores case,
        # the lock files' names match exactly when the sessions' do.
        real = Path(os.path.realpath(session_path))
        # Hidden, and never deleted: removing a lock file while another process waits
        # to open it would let two writers each lock a different file.
        self.path = real.with_name(f".{real.name}.lock")
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
