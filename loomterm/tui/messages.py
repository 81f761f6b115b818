"""Messages the engine worker and the Loom's listener post to the app.

They are the only way results travel from the worker thread to the UI: the worker never
touches a widget. ``post_message`` is thread-safe and never blocks, so the worker keeps
decoding while the UI catches up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.tui.widgets.export_dialog import ExportRequest


class LoomChanged(Message):
    """The Loom reported a change (from any thread): add, split, update, done, cursor,
    settings. Token-by-token growth comes as :class:`TokensStreamed` instead."""

    def __init__(self, event: str, node: Node | None) -> None:
        super().__init__()
        self.event = event
        self.node = node


class JobStarted(Message):
    """The worker picked up a job."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label


class JobFinished(Message):
    """The worker finished a job (whatever its outcome)."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label


class JobFailed(Message):
    """A job raised. ``error`` is shown as one line; the app keeps running."""

    def __init__(self, label: str, error: BaseException) -> None:
        super().__init__()
        self.label = label
        self.error = error


class Synced(Message):
    """The engine caught up with the typed text: ``node``'s path reads ``text``."""

    def __init__(self, node: Node, text: str) -> None:
        super().__init__()
        self.node = node
        self.text = text


class GenerationStarted(Message):
    """Generation begins from ``start`` (after the edit and the cut at the caret)."""

    def __init__(self, start: Node, text: str, n: int) -> None:
        super().__init__()
        self.start = start
        self.text = text
        self.n = n


class TokensStreamed(Message):
    """Tokens ``start..start+len(pieces)`` of ``node`` arrived (the first row of the
    batch; the others are counted in ``total``); ``rate``: tokens per second since the
    first one (None before two)."""

    def __init__(self, node: Node, start: int, pieces: list[str], total: int, rate: float | None):
        super().__init__()
        self.node = node
        self.start = start
        self.pieces = pieces
        self.total = total
        self.rate = rate


class TokensTakenBack(Message):
    """``node`` went back to its first ``length`` tokens (a banned phrase began there)."""

    def __init__(self, node: Node, length: int):
        super().__init__()
        self.node = node
        self.length = length


class GenerationDone(Message):
    """Generation ended (finished, stopped or failed midway): ``kids`` are the new
    siblings, ``start`` their parent; ``rate``: the decoding speed since the first
    token (None with fewer than two), ``seconds`` the whole job's time."""

    def __init__(
        self,
        start: Node,
        kids: list[Node],
        total: int,
        seconds: float,
        rate: float | None = None,
    ) -> None:
        super().__init__()
        self.start = start
        self.kids = kids
        self.total = total
        self.seconds = seconds
        self.rate = rate


class Moved(Message):
    """A job produced a new place to show (a picked token, a chat turn, a refresh)."""

    def __init__(self, node: Node, then_generate: bool = False) -> None:
        super().__init__()
        self.node = node
        self.then_generate = then_generate


class Exported(Message):
    """An export finished: written, or ``error`` says in one line why not (``exists``:
    the file that exists, to be replaced only once the user confirms)."""

    def __init__(self, request: ExportRequest, error: str = "", exists: str = "") -> None:
        super().__init__()
        self.request = request
        self.error = error
        self.exists = exists


class SessionSwitched(Message):
    """A new session (a new chat) replaces the open one; ``node`` is where to stand."""

    def __init__(self, loom: object, name: str, node: Node, then_generate: bool) -> None:
        super().__init__()
        self.loom = loom
        self.name = name
        self.node = node
        self.then_generate = then_generate


class SessionPreviewed(Message):
    """Another session replaces the open one before its model is loaded: ``opening``'s
    preview is shown at once and its model loads in the background."""

    def __init__(self, opening: object, name: str) -> None:
        super().__init__()
        self.opening = opening
        self.name = name


class SavedAs(Message):
    """The session (a read-only one) was saved as the new session ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class Loading(Message):
    """Long work other than reading tokens (a model loading, converting, quantizing
    while a session opens): the status bar shows its stage and how far it is."""

    def __init__(self, stage: str, done: int, total: int | None) -> None:
        super().__init__()
        self.stage = stage
        self.done = done
        self.total = total


class Prefill(Message):
    """The model has read ``done`` of the ``total`` tokens it must read (a long edit,
    a generation far from the cache): the status bar shows it, escape stops it."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done = done
        self.total = total


class ModelReady(Message):
    """The model finished loading in the background: ``loom`` is the real Loom over the
    tree the editor has been showing (``loomterm.sessions.opening``)."""

    def __init__(self, loom: object) -> None:
        super().__init__()
        self.loom = loom
