"""A key that can do nothing where it was pressed says why, briefly: a bell alone is
silent on most terminals, and a key with no visible answer looks broken."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from textual.app import App

NO_BRANCH = "No branch at the caret: move it into the text"
BUSY = "Busy generating: esc stops it"


class Generating(Protocol):
    """What :func:`refused_while_generating` reads of the app (the editor has it)."""

    generating: bool

    def bell(self) -> None: ...

    def notify(self, message: str, *, timeout: float | None = None) -> None: ...


def refuse(app: App | Generating, why: str) -> None:
    """Ring the bell and say ``why`` for two seconds."""
    app.bell()
    app.notify(why, timeout=2)


def refused_while_generating(app: Generating) -> bool:
    """True, with :data:`BUSY` said, while a generation runs: a second one waits for no
    one and would race the first for the document."""
    if app.generating:
        refuse(app, BUSY)
        return True
    return False
