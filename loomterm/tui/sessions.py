"""Session files as the editor handles them: listing, opening another session in place,
saving a read-only session as a new one, renaming, deleting, and leaving no empty
session behind.

No Textual here: the app runs these in its engine worker (opening loads a session's
tree, and perhaps its model) and shows the results.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loomterm.errors import SessionError

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.sessions.opening import SessionOpening
    from loomterm.store import SessionSummary

SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's own, beside ``name.loom``
_NAME = re.compile(r"^[^./\\][^/\\]*$")


@dataclass(frozen=True)
class SessionRow:
    """One row of the session picker."""

    name: str
    path: Path
    model: str
    nodes: int
    tokens: int
    modified: float
    size: int  # bytes on disk
    error: str | None = None
    current: bool = False


def session_file(loom: Loom) -> Path | None:
    """The file ``loom`` is recorded in, if any."""
    from loomterm.sessions.session import session_of

    session = session_of(loom)
    return session.path if session is not None else None


def is_read_only(loom: Loom) -> bool:
    """True when ``loom`` was opened read-only: its changes are not written anywhere."""
    from loomterm.sessions.session import session_of

    session = session_of(loom)
    return session is not None and session.read_only


def disk_size(path: Path) -> int:
    """Bytes the session takes on disk, its write-ahead log included."""
    total = 0
    for candidate in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
        try:
            total += candidate.stat().st_size
        except OSError:
            pass
    return total


def session_rows(current: Path | None = None) -> list[SessionRow]:
    """Every saved session, newest change first; ``current`` is marked."""
    from loomterm.sessions.session import list_sessions

    rows = []
    here = current.resolve() if current is not None else None
    for summary in list_sessions():
        rows.append(_row(summary, here))
    return rows


def _row(summary: SessionSummary, here: Path | None) -> SessionRow:
    return SessionRow(
        name=summary.name,
        path=summary.path,
        model=summary.model,
        nodes=max(0, summary.nodes - 1),
        tokens=summary.path_tokens,
        modified=summary.modified,
        size=disk_size(summary.path),
        error=summary.error,
        current=here is not None and summary.path.resolve() == here,
    )


def check_name(name: str) -> str:
    """``name`` stripped, or :class:`SessionError` saying why it cannot name a session."""
    name = name.strip()
    if not name:
        raise SessionError("a session needs a name")
    if not _NAME.match(name) or name.endswith(".loom"):
        raise SessionError(f"{name!r} cannot name a session (no '/', no leading '.')")
    return name


def new_session_path(name: str) -> Path:
    """Where a new session ``name`` goes; :class:`SessionError` (one line) when ``name``
    cannot name a session or one has it already."""
    from loomterm.sessions.session import session_path

    path = session_path(check_name(name))
    if path.exists():
        raise SessionError(f"a session named {name.strip()!r} exists already: choose another name")
    return path


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new session, or None: a name dialog says it and stays
    open, rather than closing on an error the writer must start again after."""
    try:
        new_session_path(name)
    except SessionError as exc:
        return str(exc)
    return None


def free_name(stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3``... whichever names no session yet."""
    from loomterm.sessions.session import session_path

    name, number = stem, 1
    while session_path(name).exists():
        number += 1
        name = f"{stem}-{number}"
    return name


def new_name(prefix: str = "session") -> str:
    """A fresh name from the time, e.g. ``session-20250131-142501``."""
    return free_name(time.strftime(f"{prefix}-%Y%m%d-%H%M%S"))


def save_as(loom: Loom, name: str) -> Path:
    """Write ``loom`` (a read-only session's, say) to a new session ``name``, which
    records it from now on."""
    from loomterm.sessions.session import save_loom

    path = new_session_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(loom, path)
    return path


def open_in_place(current: Loom, path: Path, progress=None) -> Loom:
    """The session at ``path`` as a live Loom, on one of ``current``'s models when it is
    the session's (no loading), else on the session's own model (loaded now). The other
    models it had attached come back too, those ``current`` has in memory without
    loading; the ones that cannot are in the new loom's ``model_notes``. ``progress``
    hears the loading (``loomterm.progress``)."""
    from loomterm.sessions.session import Session
    from loomterm.store import ModelMismatchError

    runner = current.runner
    in_memory = [runner, *current.models.values()]
    loaded = [r.loaded for r in in_memory if getattr(r, "loaded", None) is not None]
    loaded = list({id(m): m for m in loaded}.values())  # the active one first
    options = {
        "n_ctx": current.n_ctx,
        "kv_budget": getattr(runner, "kv_budget", None),
        "reattach": True,
        "loaded_models": loaded,
        "on_note": lambda _note: None,  # the editor shows ``model_notes`` itself
        "progress": progress,
    }
    for model in loaded:
        try:
            return Session.open(path, loaded=model, **options).loom
        except ModelMismatchError:
            pass
    if loaded:
        options |= {"device": str(loaded[0].device)}
    return Session.open(path, **options).loom


def opening_elsewhere(current: Loom, path: Path) -> SessionOpening | None:
    """The session at ``path`` to open on a model that is not in memory: its file read
    (and locked) now, to show at once, its model to load in the background (as at
    start, ``loomterm.sessions.opening``; the device, context window and KV cap are
    ``current``'s). None when one of ``current``'s loaded models is the session's:
    :func:`open_in_place` opens it without loading anything."""
    from loomterm.config.settings import EngineOptions
    from loomterm.sessions.identity import same_model
    from loomterm.sessions.opening import SessionOpening
    from loomterm.sessions.session import read_file

    runner = current.runner
    in_memory = [runner, *current.models.values()]
    loaded = [r.loaded for r in in_memory if getattr(r, "loaded", None) is not None]
    opened = read_file(path, False)
    recorded = opened.data.model.get("fingerprint")
    if any(same_model(recorded, model.fingerprint) for model in loaded):
        opened.close()
        return None
    budget = getattr(runner, "kv_budget", None)
    options = EngineOptions(
        device=str(loaded[0].device) if loaded else "auto",
        n_ctx=current.n_ctx,
        kv_budget=str(budget) if budget is not None else None,
    )
    return SessionOpening(path, options, opened)


def create_like(current: Loom, name: str) -> Loom:
    """A new, empty session ``name`` on ``current``'s model and settings (not its
    story's memory, author's note or world info)."""
    from loomterm.sessions.session import save_loom

    path = new_session_path(name)
    if current.capabilities.node_kv:
        from loomterm.engine.open import runner_like

        fresh = type(current)(runner_like(current.runner))  # its threads and options too
    else:  # a server's runner keeps nothing per tree: the new loom shares it
        fresh = type(current)(current.runner)
    from loomterm.tui.ops import settings_for_new_story

    fresh.settings = settings_for_new_story(current)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_loom(fresh, path)
    return fresh


def _locked(path: Path):
    """The writer's lock on ``path`` (refused while another loomterm has it open)."""
    from loomterm.store import SessionLock

    lock = SessionLock(path)
    lock.acquire()
    return lock


def _drop_lock_file(lock) -> None:
    """Delete the lock file of a session that is gone (renamed or deleted), while its
    lock is held, so no ``.<name>.loom.lock`` is left behind for it."""
    try:
        lock.path.unlink(missing_ok=True)
    except OSError:  # Windows keeps an open file; the empty lock file is harmless
        pass


def rename(path: Path, name: str) -> Path:
    """Rename the (closed) session at ``path`` to ``name``; returns the new path."""
    from loomterm.sessions.kv_snapshot import snapshot_path

    target = new_session_path(name)
    lock = _locked(path)
    try:
        os.replace(path, target)
        for suffix in SIDE_FILES:
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.replace(side, target.with_name(target.name + suffix))
        snapshot = snapshot_path(path)
        if snapshot.exists():
            os.replace(snapshot, snapshot_path(target))
        _drop_lock_file(lock)
    finally:
        lock.release()
    return target


def delete(path: Path) -> None:
    """Delete the (closed) session at ``path``, its log and its KV snapshot."""
    from loomterm.sessions.kv_snapshot import snapshot_path

    lock = _locked(path)
    try:
        for item in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
            item.unlink(missing_ok=True)
        snapshot_path(path).unlink(missing_ok=True)
        _drop_lock_file(lock)
    finally:
        lock.release()


def discard_if_empty(loom: Loom) -> bool:
    """Delete the file of ``loom``'s closed session if it holds nothing (no node below
    the root), so a start quit before anything was written leaves no session behind.
    Read-only sessions are never touched. Returns True when the file was deleted."""
    from loomterm.sessions.session import session_of

    session = session_of(loom)
    if session is None or session.read_only or not session.closed or loom.root.children:
        return False
    if not session.path.exists():
        return False
    try:
        delete(session.path)
    except (OSError, SessionError):
        return False
    return True
