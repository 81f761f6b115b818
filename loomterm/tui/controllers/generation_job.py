"""One generation as the engine worker runs it (:class:`GenerationJob`) and what it
reports: it first hands the engine any typed text and cuts the path at the caret, then
generates, streaming through :class:`Streamer` (batched ``Streamed``) and always ending
in one ``Done``. Its messages are handled as the generation controller's
(``on_generation_started``, ...; ``tui.controllers.generation`` shows them).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.errors import LoomError, PrefillCancelled
from loomterm.tree import Node
from loomterm.tui import ops
from loomterm.tui.controllers.context import ContextAssembled
from loomterm.tui.controllers.typing import Typing

if TYPE_CHECKING:
    from loomterm.config.settings import Settings
    from loomterm.engine import Loom
    from loomterm.tui.controllers.context import Context
    from loomterm.tui.controllers.editor import Editor

STREAM_INTERVAL = 0.03  # streamed tokens are posted at most this often


@dataclass
class GenerationJob:
    """One generation as the worker runs it: sync the typed text, cut the path at the
    caret, generate, and always end in one :class:`GenerationJob.Done`. Made on the UI
    thread with what the document and settings are at that moment."""

    @dataclass
    class Started(Message, namespace="generation"):
        """Generation begins from ``start`` (after the edit and the cut at the caret)."""

        start: Node
        text: str
        n: int

    @dataclass
    class Streamed(Message, namespace="generation"):
        """Tokens ``start..start+len(pieces)`` of ``node`` arrived (the first row of the
        batch; the others are counted in ``total``); ``rate``: tokens per second since the
        first one (None before two)."""

        node: Node
        start: int
        pieces: list[str]
        total: int
        rate: float | None

    @dataclass
    class TakenBack(Message, namespace="generation"):
        """``node`` went back to its first ``length`` tokens (a banned phrase began there)."""

        node: Node
        length: int

    @dataclass
    class Done(Message, namespace="generation"):
        """Generation ended (finished, stopped or failed midway): ``kids`` are the new
        siblings, ``start`` their parent; ``rate``: the decoding speed since the first
        token (None with fewer than two), ``seconds`` the whole job's time."""

        start: Node
        kids: list[Node]
        total: int
        seconds: float
        rate: float | None = None

    app: Editor
    context_pane: Context  # the context view: it follows the generation when shown
    loom: Loom
    cancel: threading.Event
    n: int
    base: Node  # the document's node
    start: Node | None  # generate from here instead of the caret (regenerate)
    text: str | None  # typed text to sync first
    keep: int  # tokens of ``base``'s path the document shows
    caret: int | None  # cut the path here (None: at the end)
    settings: Settings
    models: list[tuple[str, int]] | None = None
    meta: dict | None = None
    context: str | None = None
    typing_run: ops.TypingRun | None = None  # the run of typing the synced text is in

    def run(self) -> None:
        """In the worker: the whole generation; its end is always posted."""
        app = self.app
        self.node = self.start if self.start is not None else self.base
        self.synced: Node | None = None  # the typed text's node, once in the tree
        self.kids: list[Node] = []
        self.streamer: Streamer | None = None  # made when generating starts: it times it
        self.started = False
        try:
            self.prepare()
            if self.node.end == 0:
                raise LoomError("nothing to continue from: type something first")
            if self.cancel.is_set():
                return
            self.generate()
        except PrefillCancelled:
            # Escape while the model read the text: no generation, the edit is kept.
            if not self.started and self.synced is not None and self.text is not None:
                self.node = self.synced
                app.post_message(Typing.Synced(self.synced, self.text))
            raise
        finally:
            streamer = self.streamer
            total = streamer.total if streamer is not None else 0
            seconds = streamer.seconds if streamer is not None else 0.0
            rate = streamer.rate if streamer is not None else None
            app.post_message(GenerationJob.Done(self.node, self.kids, total, seconds, rate))

    def prepare(self) -> None:
        """Sync the typed text (or cut the path at what is shown), then cut at the
        caret: ``self.node`` is where the generation starts."""
        loom, base, text = self.loom, self.base, self.text
        if text is not None:
            try:
                self.node = self.synced = ops.sync_text(
                    loom, base, text, self.keep, self.typing_run
                )
            except PrefillCancelled as stopped:
                self.synced = stopped.node
                raise
        elif self.start is None and self.keep < base.end:
            self.node = loom.truncate(base, self.keep)
        if self.caret is not None:
            position, partial = ops.split_at_char(loom, self.node, self.caret)
            self.node = ops.start_point(loom, self.node, position, partial)

    def generate(self) -> None:
        """Generate from ``self.node``, streaming to the app."""
        loom, node = self.loom, self.node
        loom.cursor = node  # here, not on the UI thread: the engine is busy next
        if self.context_pane.shown:  # what the model sees from here, then it follows
            with loom.exclusive():
                runs = self.context_pane.runs(node)
            self.app.post_message(ContextAssembled(runs))
        self.app.post_message(GenerationJob.Started(node, "", self.n))
        self.started = True
        self.streamer = streamer = Streamer(self.app, loom, start=node, n=self.n)
        foreseen = self.foreseen(node, streamer)
        if foreseen is not None:
            self.kids = foreseen
            return
        self.kids = loom.generate(
            node,
            self.settings.max_new_tokens,
            n=self.n,
            on_token=streamer.on_token,
            on_take_back=streamer.on_take_back,
            cancel=self.cancel,
            models=self.models,
            meta=self.meta,
            context=self.context,
            **self.settings.sampling(),
        )
        streamer.flush()

    def foreseen(self, node: Node, streamer: Streamer) -> list[Node] | None:
        """The children thinking ahead wrote for this very request, shown whole at once
        (``engine.loom.foresight``), or None: then generate (anything foreseen for
        another request is dropped)."""
        loom = self.loom
        if self.models is not None or self.meta is not None or not loom.foresights():
            return None
        kids = loom.take_foresight(loom.ask(node, self.n, self.settings, self.context))
        if not kids:
            return None
        result = loom.last_result
        streamer.known_rate = result.tokens_per_second if result is not None else None
        for kid in kids:
            for token, piece in zip(kid.tokens, loom.token_pieces(kid.tokens), strict=True):
                streamer.on_token(kid, token, piece)
        streamer.flush()
        return kids


class Streamer:
    """Collects streamed tokens in the worker and posts them in small batches, so a fast
    model does not flood the UI with one message per token.

    With ``loom``, the loom's cursor moves to the first new child at its first token
    (from the worker, which holds the engine): the session file then points at the text
    being written, so a crash mid-generation reopens there, not before it."""

    def __init__(
        self, app: Editor, loom: Loom | None = None, start: Node | None = None, n: int = 1
    ) -> None:
        self.app = app
        self.loom = loom
        self.start_node = start  # where the generation was asked to start
        self.n = n
        self.first: Node | None = None
        self.start = 0
        self.shown = 0
        self.pieces: list[str] = []
        self.total = 0
        self.began = time.monotonic()
        self.last_post = self.began
        self.posted_total = 0
        self.first_at: float | None = None  # when the first token came (after the read)
        self.last_at = self.began
        self.known_rate: float | None = None  # foreseen text: the rate it was written at

    @property
    def rate(self) -> float | None:
        """Tokens per second since the first token: the decoding speed, without the
        time the model spent reading the prompt. None before two tokens."""
        if self.known_rate is not None:
            return self.known_rate or None
        if self.first_at is None or self.total < 2 or self.last_at <= self.first_at:
            return None
        return (self.total - 1) / (self.last_at - self.first_at)

    def on_token(self, node: Node, token_id: int, piece: str) -> None:
        self.total += 1
        self.last_at = time.monotonic()
        if self.first_at is None:
            self.first_at = self.last_at
        if self.first is None:
            self.first = node
            if self.loom is not None:
                self.loom.cursor = node
            if self.start_node is not None and node.parent is not self.start_node:
                # Token healing started before the typed word's tokens: the document
                # shows the path up to there, and the healed tokens spell the word again.
                self.app.post_message(GenerationJob.Started(node.parent, "", self.n))
        if node is self.first:
            self.pieces.append(piece)
        now = time.monotonic()
        if now - self.last_post >= STREAM_INTERVAL:
            self.flush(now)

    def on_take_back(self, node: Node, length: int) -> None:
        """A banned phrase made ``node`` go back to its first ``length`` tokens."""
        if node is not self.first:
            return
        kept = max(0, length - self.shown)
        self.pieces = self.pieces[:kept]
        if length < self.shown:
            self.shown = length
            self.app.post_message(GenerationJob.TakenBack(node, length))

    def flush(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        # Posted too when only the other rows grew (the first one ended): the branch
        # pane's labels follow every row.
        if self.first is not None and (self.pieces or self.total > self.posted_total):
            self.app.post_message(
                GenerationJob.Streamed(self.first, self.shown, self.pieces, self.total, self.rate)
            )
            self.shown += len(self.pieces)
            self.pieces = []
            self.posted_total = self.total
        self.last_post = now

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.began
