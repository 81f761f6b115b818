"""Weave: grow the tree from the caret by itself (``loomterm.engine.loom.weave``).

The action asks for the weave's shape (:class:`~loomterm.tui.widgets.weave_dialog.
WeaveScreen`), then runs it as one job on the engine worker: the path is cut at the
caret (a new branch there, as generating does), and every level's siblings are
generated as one batch per kept node. The worker reports through
:class:`WeaveProgress` (the status bar: ``weave level 2/3 · 4/8 nodes · 96 tokens · esc
stops``) and one :class:`WeaveDone`. ``generating`` is True meanwhile, so escape sets
the app's cancel event: the weave stops within a token and keeps what it made. At the
end the document shows the best branch; the branch pane shows the whole subtree.
"""

from __future__ import annotations

import queue
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.errors import LoomError
from loomterm.tree import Node
from loomterm.tui import ops
from loomterm.tui.controllers.actions import key_action
from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.feedback import refused_while_generating
from loomterm.tui.widgets.weave_dialog import WeaveChoice, WeaveScreen

if TYPE_CHECKING:
    from loomterm.engine.loom.weave import WeaveResult
    from loomterm.tui.controllers.editor import Editor
    from loomterm.tui.controllers.navigation import Navigation

POST_INTERVAL = 0.1  # token counts reach the status bar at most this often


@dataclass
class WeaveProgress(Message):
    """The weave is at ``level`` of ``depth``: ``done`` of ``total`` nodes made there,
    ``tokens`` generated so far in all."""

    level: int
    depth: int
    done: int
    total: int
    tokens: int


@dataclass
class WeaveDone(Message):
    """The weave ended (finished, stopped or failed): ``result`` is None when it failed
    before making anything; ``start`` is where it grew from."""

    start: Node
    result: WeaveResult | None


class Reporter:
    """In the worker: turns the engine's progress and tokens into messages, and hands
    the engine the ratings given meanwhile (:meth:`Weave.rate_while_weaving`)."""

    def __init__(self, app: Editor, depth: int, ratings: queue.SimpleQueue) -> None:
        self.app = app
        self.depth = depth
        self.ratings = ratings
        self.level, self.done, self.total = 1, 0, 0
        self.tokens = 0
        self.last = 0.0

    def progress(self, level: int, done: int, total: int) -> None:
        # Called between two batches and before each level is ranked, on the worker,
        # which holds the engine: ratings given since steer what comes next.
        while True:
            try:
                node, rating = self.ratings.get_nowait()
            except queue.Empty:
                break
            if node.id in self.app.loom.tree.nodes:
                self.app.loom.set_meta(node, rating=rating)
        self.level, self.done, self.total = level, done, total
        self.post()

    def on_token(self, node: Node, token_id: int, piece: str) -> None:
        self.tokens += 1
        if time.monotonic() - self.last >= POST_INTERVAL:
            self.post()

    def post(self) -> None:
        self.last = time.monotonic()
        self.app.post_message(
            WeaveProgress(self.level, self.depth, self.done, self.total, self.tokens)
        )


@dataclass(eq=False, repr=False)
class Weave(Controller):
    """The weave action, its dialog, its progress in the status bar and its result on
    screen."""

    navigation: Navigation
    # the last shape asked for, offered again
    choice: WeaveChoice | None = field(default=None, init=False)
    progress: WeaveProgress | None = field(default=None, init=False)  # None: no weave running
    # ratings for the running weave
    ratings: queue.SimpleQueue | None = field(default=None, init=False)

    @property
    def weaving(self) -> bool:
        """True while a weave runs."""
        return self.progress is not None

    def rate_while_weaving(self, node: Node, rating: int | None) -> bool:
        """For the ratings action: while a weave runs, ``rating`` (1, -1, None to
        clear) reaches ``node`` from the worker between two batches, without waiting
        for the weave, so it steers the levels still to come (``score="rating"``).
        False when no weave runs: rate as usual."""
        ratings = self.ratings
        if ratings is None:
            return False
        ratings.put((node, rating))
        return True

    @key_action("weave")
    def ask(self) -> None:
        """The weave dialog; the shape chosen there is woven once the engine is idle."""
        app = self.app
        if refused_while_generating(app):
            return
        app.push_screen(WeaveScreen(self.choice), self.answered)

    def answered(self, choice: WeaveChoice | None) -> None:
        if choice is None:
            return
        self.choice = choice
        self.jobs.when_idle(lambda: self.start(choice))

    def start(self, choice: WeaveChoice) -> None:
        """Weave ``choice`` from the caret, as one job."""
        app = self.app
        if refused_while_generating(app):
            return
        loom, doc = app.loom, app.doc
        base = doc.node or loom.root
        keep = doc.shown_tokens
        caret = doc.caret if doc.caret < doc.length else None
        sampling = loom.settings.sampling()  # the settings of this moment
        cancel = self.jobs.cancel
        cancel.clear()
        app.generating = True
        self.progress = WeaveProgress(1, choice.depth, 0, choice.n, 0)
        ratings = self.ratings = queue.SimpleQueue()
        self.jobs.lock()  # the document holds still until the weave is over
        app.status_line.soon()

        def job() -> None:
            from loomterm.engine.loom.weave import WeaveRequest, weave

            node = base
            result = None
            try:
                if keep < base.end:
                    node = loom.truncate(base, keep)
                if caret is not None:
                    position, partial = ops.split_at_char(loom, node, caret)
                    node = ops.start_point(loom, node, position, partial)
                if node.end == 0:
                    raise LoomError("nothing to weave from: type something first")
                reporter = Reporter(app, choice.depth, ratings)
                request = WeaveRequest(
                    node,
                    **asdict(choice),  # the shape: n, depth, keep, tokens, score
                    settings=sampling,
                    cancel=cancel,
                    progress=reporter.progress,
                    on_token=reporter.on_token,
                )
                result = weave(loom, request)
            finally:
                app.post_message(WeaveDone(node, result))

        self.jobs.submit("weave", job)

    def state(self) -> str:
        """``weave level 2/3 · 4/8 nodes · 96 tokens · esc stops`` while weaving."""
        p = self.progress
        if p is None:
            return ""
        return (
            f"weave level {p.level}/{p.depth} \u00b7 {p.done}/{p.total} nodes \u00b7 "
            f"{p.tokens} tokens \u00b7 esc stops"
        )

    def progressed(self, message: WeaveProgress) -> None:
        if self.progress is not None:
            self.progress = message
            self.app.status_line.soon()

    def done(self, message: WeaveDone) -> None:
        """On the UI thread: the weave ended; show its best branch and what it made."""
        app = self.app
        app.generating = False
        self.progress = None
        ratings, self.ratings = self.ratings, None
        while ratings is not None and not ratings.empty():  # given after the last batch
            node, rating = ratings.get_nowait()
            if node.id in app.loom.tree.nodes:
                app.loom.set_meta(node, rating=rating)
        self.jobs.unlock()
        result = message.result
        if result is not None:
            target = result.best or message.start
            if target is not app.doc.node:
                self.navigation.show_node(target)
            app.notify(weave_summary(result), timeout=6)
        app.status_line.soon()
        self.jobs.drain()


def weave_summary(result: WeaveResult) -> str:
    """One line: what the weave made and what the document now shows."""
    made = len(result.nodes)
    levels = len(result.levels)
    head = "Weave stopped" if result.cancelled else "Weave"
    text = (
        f"{head}: {made} node{'s' if made != 1 else ''} in {levels} level"
        f"{'s' if levels != 1 else ''}, {result.tokens} tokens, {result.seconds:.1f} s"
    )
    best = result.best
    if best is None:
        return text
    value = result.scores.get(best.id)
    if value is None:
        return text + "; showing the best branch"
    figure = (
        f"perplexity {value:.2f}"
        if result.score == "perplexity"
        else f"mean log-probability {value:.2f}"
    )
    return text + f"; showing the best branch ({figure})"
