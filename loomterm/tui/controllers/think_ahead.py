"""Think-ahead: while the writer pauses, the requests the next ctrl+r and ctrl+n would
make are generated ahead, out of sight, so the key shows them at once.

After ``think_ahead_pause`` seconds without a key (the pause starts again at every key
and at the end of every job), if the engine is idle and has all the typed text, the
editor *plans* the likely requests at the caret (:meth:`ThinkAhead.plan`): ctrl+r's (one
new sibling of the generated text the caret is in) and ctrl+n's (N siblings from the end
of the document, one model attached). It writes them ahead as one job on the engine
worker, with the settings of that moment, into nodes the tree keeps out of sight
(``engine.loom.foresight``). The job is low priority: any key, and any other job
submitted or waited for (``Jobs.give_way``), sets its cancel event, and the decoder
stops within one token, dropping what it half wrote.

Every generation asks the loom for what was foreseen (``GenerationJob.foreseen``): the
same node, settings and count show them whole, with their KV; anything else drops
them and generates as usual. Foreseen nodes live in memory only: the session file records them
when they are shown, never before; closing the session drops them.

``think_ahead`` is ``auto`` (on for local models, torch and llama.cpp; off for a
server, where the work would cost someone else), ``on`` or ``off``. The status bar says
``thinking ahead…`` while the job runs and ``thought ahead`` once foreseen nodes wait for the
caret's keys.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.errors import LoomError
from loomterm.tui.controllers.controller import Controller

if TYPE_CHECKING:
    from textual.timer import Timer

    from loomterm.engine.loom.foresight import Ask
    from loomterm.tui.controllers.generation import Generation
    from loomterm.tui.controllers.models import Models

LOCAL = ("torch", "llama.cpp")  # backends ``auto`` thinks ahead on
LABEL = "think ahead"  # the job's label


@dataclass(eq=False, repr=False)
class ThinkAhead(Controller):
    """The pause, the plan and the low-priority job (module docstring)."""

    generation: Generation
    models: Models
    timer: Timer | None = field(default=None, init=False)
    cancel: threading.Event | None = field(default=None, init=False)  # the latest job's
    # set when the latest job has ended
    done: threading.Event | None = field(default=None, init=False)

    # -- when ------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """Whether the setting asks for thinking ahead on this model (never while the
        model loads: there is none to ask yet)."""
        if self.app.loader is not None:
            return False
        loom = self.app.loom
        mode = loom.settings.think_ahead
        return mode == "on" or (mode == "auto" and loom.runner.backend in LOCAL)

    @property
    def thinking(self) -> bool:
        """The job is queued or running."""
        return self.done is not None and not self.done.is_set()

    def key(self) -> None:
        """A key came: stop thinking ahead at once, and start the pause again."""
        if self.cancel is not None:
            self.cancel.set()
        self.rest()

    def rest(self) -> None:
        """Start the pause (again): thinking ahead begins when it runs out."""
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
        if self.enabled:
            self.timer = self.app.set_timer(self.app.loom.settings.think_ahead_pause, self.due)

    def due(self) -> None:
        """The pause ran out: think ahead, where there is something to think of and the
        engine is free (else the end of its job, or the next key, starts the pause)."""
        self.timer = None
        app = self.app
        if (
            not self.enabled
            or app.loader is not None
            or app.generating
            or not self.jobs.idle
            or app.doc.dirty
        ):
            return
        asks = self.plan()
        loom = app.loom
        foreseen = [f.ask for f in loom.foresights()]
        todo = [a for a in asks if not any(a.matches(f) for f in foreseen)]
        if not todo:
            return
        cancel, done = threading.Event(), threading.Event()
        self.cancel, self.done = cancel, done

        def job() -> None:
            try:
                loom.drop_foresight(keep=asks)  # what no key here would ask for now
                for ask in todo:
                    if cancel.is_set():
                        return
                    loom.foresee(ask, cancel)
            except LoomError:
                pass  # the request itself will say it, when it is made
            finally:
                done.set()

        self.jobs.submit(LABEL, job, low=cancel)
        app.status_line.soon()

    # -- what --------------------------------------------------------------------------------
    def plan(self) -> list[Ask]:
        """The requests ctrl+r and ctrl+n would make at the caret now, likeliest first."""
        app = self.app
        loom = app.loom
        settings = loom.settings
        asks: list[Ask] = []
        start = self.generation.regeneration_start()
        if start is not None and start.end:
            asks.append(loom.ask(start, 1, settings))
        doc = app.doc
        node = doc.node or loom.root
        if (
            len(self.models.attached()) < 2  # else ctrl+n opens a dialog first
            and not doc.dirty
            and doc.caret >= doc.length
            and doc.shown_tokens == node.end
            and node.end
        ):
            ask = loom.ask(node, max(1, settings.n), settings)
            if not any(ask.matches(other) for other in asks):
                asks.append(ask)
        return asks

    def state(self, idle: bool = False) -> str:
        """The status bar's mark: ``thinking ahead…``, ``thought ahead`` (asked only
        while the engine is ``idle``: it reads the loom) or nothing."""
        if self.thinking:
            return "thinking ahead\u2026"
        if not idle:
            return ""
        foreseen = [f.ask for f in self.app.loom.foresights()]
        if foreseen and any(a.matches(f) for a in self.plan() for f in foreseen):
            return "thought ahead"
        return ""
