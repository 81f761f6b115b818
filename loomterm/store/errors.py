"""The errors the session store raises, and the one-line message for a damaged file."""

from __future__ import annotations

from pathlib import Path

from loomterm.errors import SessionError


class ModelMismatchError(SessionError):
    """The session was made with another model; its token ids mean nothing to this one.

    Attributes:
        stored: The session's model fingerprint.
        given: The fingerprint of the model asked for.
    """

    def __init__(self, message: str, stored: dict | None = None, given: dict | None = None):
        super().__init__(message)
        self.stored = stored or {}
        self.given = given or {}


class SessionLockedError(SessionError):
    """Another process has the session open for writing."""


def damaged(path: Path, why: str) -> SessionError:
    """The error for a file that is not a readable session, ``why`` kept to one line."""
    # SQLite's reports can span lines ("*** in database main ***\nPage 5: ..."): keep
    # the message to one line, as every LoomError is.
    lines = [line.strip() for line in why.splitlines() if line.strip() and "***" not in line]
    why = "; ".join(lines) or why.strip()
    if len(why) > 160:
        why = why[:159] + "\u2026"
    return SessionError(f"{path} is not a readable loomterm session: {why}")
