"""Atomic file replacement: a file holds its old content or its new, never a torn mix.

Standard library only, and the bottom layer: the session store, the exporters, the
editor's preferences, the engine's caches and the KV snapshots all write through here.

The new content goes to a temporary file beside the target (same folder, so the same
file system), is synced to disk, takes the old file's permissions (a new file gets the
usual ``0o666`` less the umask), and is renamed over the target with :func:`os.replace`;
then the folder is synced where the system allows it, so the rename itself survives a
power cut. On any failure the temporary file is removed and the target is untouched. A
process killed with ``SIGKILL`` mid-write leaves the target untouched too, plus at most
one hidden ``.<name>.<random>.tmp`` beside it.

A symbolic link is followed: the file it points to is replaced and the link stays.
What is not a regular file is never replaced: :func:`write_atomic` writes straight into
a device or a pipe (``-o /dev/null``, ``/dev/stdout``, a FIFO), as a shell's ``>`` does,
and :func:`atomic_path` refuses one (renaming over ``/dev/null`` would turn the
machine's null device into a plain file).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_atomic"]


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8, newlines untouched).

    Raises :class:`OSError` (the target untouched, no temporary file left) when the
    folder is missing or unwritable, the disk is full, and so on.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if _is_special(_target(Path(path))):
        with open(path, "wb") as handle:  # a device or a pipe: written into, never replaced
            handle.write(payload)
        return
    with atomic_path(path) as temp, open(temp, "wb") as handle:
        handle.write(payload)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that makes the file itself
    (``safetensors.torch.save_file``, ``sqlite3.connect``...).

    The temporary file exists, empty, when the block starts; the writer may overwrite
    it. When the block ends normally it is synced and moved over ``path``; when the
    block raises, it is deleted and ``path`` is left as it was.
    """
    target = _target(Path(path))
    if _is_special(target):
        raise OSError(errno.EPERM, "not a regular file, and not replaced", os.fspath(target))
    temp = _create_temp(target)
    try:
        yield temp
        _sync_file(temp)
        _copy_mode(target, temp)
        os.replace(temp, target)
    except BaseException:
        _discard(temp)
        raise
    _sync_folder(target.parent)


def _is_special(path: Path) -> bool:
    """``path`` exists and is neither a regular file nor a folder (a device, a pipe, a
    socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _target(path: Path) -> Path:
    """The file that will really be replaced: a symbolic link's target, not the link."""
    if not path.name:  # "/", ".": a folder, named without a file in it
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _create_temp(target: Path) -> Path:
    """An empty, new file beside ``target``, made with the usual umask-derived mode.

    Not ``tempfile.mkstemp``: its private ``0o600`` would stick to the finished file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temp, flags, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return temp
    raise FileExistsError(f"no free temporary name beside {target}")


def _sync_file(path: Path) -> None:
    # Read-write: Windows refuses to flush a file opened read-only.
    with open(path, "r+b") as handle:
        os.fsync(handle.fileno())


def _copy_mode(source: Path, dest: Path) -> None:
    """Give ``dest`` the permission bits of ``source``, if ``source`` exists."""
    try:
        mode = stat.S_IMODE(os.stat(source).st_mode)
    except FileNotFoundError:
        return
    if stat.S_IMODE(os.stat(dest).st_mode) != mode:
        os.chmod(dest, mode)


def _discard(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _sync_folder(folder: Path) -> None:
    """Make the rename durable where folders can be opened and synced (not Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # the new file is in place; only its survival of a power cut is in doubt
    finally:
        os.close(fd)
