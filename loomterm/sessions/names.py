"""Session names and files: where a name points, the file of an existing session, and
the sessions under ``sessions_dir()``. Light: no engine."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from loomterm import store as store_mod
from loomterm.config.locations import sessions_dir
from loomterm.errors import SessionError
from loomterm.store import SESSION_SUFFIX, SessionSummary


def session_path(name_or_path: str | os.PathLike) -> Path:
    """Where a session name or path points (it need not exist yet).

    Anything that looks like a path (has a folder separator, ends in ``.loom``, or is
    an existing file) is a path; anything else is a name under ``sessions_dir()``.
    """
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    separators = [sep for sep in (os.sep, os.altsep) if sep]
    if path.suffix == SESSION_SUFFIX or any(sep in text for sep in separators) or path.is_file():
        return path
    if not text or text.startswith("."):
        raise SessionError(f"{text!r} is not a usable session name")
    return sessions_dir() / f"{text}{SESSION_SUFFIX}"


def resolve_session(name_or_path: str | os.PathLike) -> Path:
    """The file of an existing session, or :class:`SessionError` listing close names."""
    path = session_path(name_or_path)
    if path.is_file():
        return path
    wanted = path.name.removesuffix(SESSION_SUFFIX)
    names = sorted(p.name.removesuffix(SESSION_SUFFIX) for p in _session_files())
    close = difflib.get_close_matches(wanted, names, n=5, cutoff=0.5)
    if close:
        hint = "close matches: " + ", ".join(close)
    elif names:
        hint = f"{len(names)} session(s) exist; see 'loomterm sessions'"
    else:
        hint = f"no sessions saved yet in {sessions_dir()}"
    raise SessionError(f"no session named {wanted!r} ({hint})")


def _session_files() -> list[Path]:
    return [p for p in sessions_dir().glob(f"*{SESSION_SUFFIX}") if p.is_file()]


def list_sessions() -> list[SessionSummary]:
    """Every session under ``sessions_dir()``, newest change first. Damaged files are
    listed with their ``error`` set rather than hidden."""
    summaries = [store_mod.summarize(path) for path in _session_files()]
    return sorted(summaries, key=lambda s: s.modified, reverse=True)
