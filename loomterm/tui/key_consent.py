"""Asking before the API key goes to a server that a session file names.

A session file (or an imported tree) may name any server, and a shared file is not the
user's word: its servers get no key (``engine.remote.credentials``) until the user says
so here. Before the editor connects to such a server, and only when a key would be held
back, :class:`KeyConsentScreen` names the host and asks: send it this time, always for
this server (``send_key = true`` in the config), never for this server
(``send_key = false``), or not now (the default: nothing is sent, nothing remembered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label

from loomterm.tui.widgets.dialogs import DialogScreen, dialog_css, dialog_title

if TYPE_CHECKING:
    from textual.app import App

    from loomterm.sessions.opening import SessionOpening

ANSWERS = ("once", "always", "never")


class KeyConsentScreen(DialogScreen["str | None"]):
    """Send the API key to ``origin``? Dismisses with "once", "always", "never" or None
    (not now)."""

    DEFAULT_CSS = dialog_css("KeyConsentScreen")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('once')", "Send this time", id="key_once"),
        Binding("a", "answer('always')", "Always", id="key_always"),
        Binding("v", "answer('never')", "Never", id="key_never"),
        Binding("n,escape", "answer('')", "Not now", id="key_not_now"),
    ]

    def __init__(self, origin: str, variable: str) -> None:
        super().__init__()
        self.origin = origin
        self.variable = variable

    @property
    def question(self) -> str:
        return f"Send your API key ({self.variable}) to {self.origin}?"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title(self.question)
            yield Label(
                "This session file names that server; you did not. Whoever runs it "
                "could use your key. Without it, the server may refuse to answer.",
                markup=False,
            )
            yield Label(
                "y send this time · a always for this server · v never · n not now",
                classes="dialog--hint",
                markup=False,
            )
            with Horizontal(classes="dialog--buttons"):
                yield Button("Not now", id="not-now", compact=True)
                yield Button("Never", id="never", compact=True)
                yield Button("Always", id="always", compact=True)
                yield Button("Send this time", id="once", variant="warning", compact=True)

    def on_mount(self) -> None:
        self.query_one("#not-now", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id if event.button.id in ANSWERS else "")

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer or None)


# Origins already asked about in this run, whatever the answer: asked once.
_asked: set[str] = set()


def forget_answers() -> None:
    """Ask again about every server (and forget every "send this time")."""
    from loomterm.engine.remote.credentials import revoke_all

    _asked.clear()
    revoke_all()


def servers_to_ask(opening: SessionOpening) -> list[tuple[str, str]]:
    """(url, variable) for each server ``opening``'s file names (its model, the other
    models of its table) that a key would be held back from: one per origin."""
    data = opening.opened.data if opening.opened is not None else None
    if data is None:
        return []
    urls: list[str] = []
    if not opening.options.model:  # a --model the user gave is theirs: no question
        urls.append(str(data.model.get("source") or ""))
    urls += [str(record.get("source") or "") for record in (data.models or {}).values()]
    return _to_ask(urls)


def servers_in_file(path: Path) -> list[tuple[str, str]]:
    """As :func:`servers_to_ask`, for the session file at ``path`` read for its model
    records only (a session switched to on a model in memory: its other models may be
    servers). A file that cannot be read asks nothing: opening it says why."""
    import sqlite3

    from loomterm.store.reader import connect_read_only, meta_rows

    try:
        conn = connect_read_only(path)
        try:
            info = meta_rows(conn)
        finally:
            conn.close()
    except (sqlite3.Error, OSError, ValueError):
        return []
    model = info.get("model") if isinstance(info.get("model"), dict) else {}
    models = info.get("models") if isinstance(info.get("models"), dict) else {}
    records = [model, *(r for r in models.values() if isinstance(r, dict))]
    return _to_ask([str(record.get("source") or "") for record in records])


def _to_ask(urls: list[str]) -> list[tuple[str, str]]:
    from loomterm.engine.remote import is_server_url
    from loomterm.engine.remote.credentials import Origin, needs_consent

    asked: list[tuple[str, str]] = []
    origins = set()
    for url in urls:
        if not is_server_url(url):
            continue
        variable = needs_consent(url)
        origin = str(Origin.of(url)) if variable else None
        if origin is not None and origin not in origins and origin not in _asked:
            origins.add(origin)
            asked.append((url, variable))
    return asked


def ask_then(app: App, servers: Iterable[tuple[str, str]], then: Callable[[], None]) -> None:
    """Ask about each server in turn (``servers_to_ask``), act on each answer, then run
    ``then`` (whatever was answered: a server without the key says so itself)."""
    from loomterm.engine.remote.credentials import CredentialError, Origin, grant, remember

    pending = list(servers)
    if not pending:
        then()
        return
    url, variable = pending[0]

    def answered(answer: str | None) -> None:
        _asked.add(str(Origin.of(url)))
        try:
            if answer in ("once", "always"):
                grant(url)
            if answer in ("always", "never"):
                path = remember(url, answer == "always")
                app.notify(f"Remembered for {Origin.of(url)} in {path}", timeout=4)
        except (CredentialError, OSError) as exc:
            app.notify(" ".join(str(exc).split()), severity="error", timeout=8)
        ask_then(app, pending[1:], then)

    app.push_screen(KeyConsentScreen(str(Origin.of(url)), variable), answered)
