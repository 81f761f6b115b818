"""The engine's jobs: one thread that runs model work one job at a time, for the life of
the app.

:class:`Jobs` owns the queue, the cancel and interrupt events, the edit locks, the count
of jobs in flight and the actions waiting for the engine to be idle
(:meth:`Jobs.when_idle`). A job reports back only by posting messages
(each declared beside the controller that posts it); the worker never touches a widget. The app hears
:class:`~Jobs.Finished` and hands it to :meth:`Jobs.finished`.

The worker is a daemon thread of its own, not a Textual thread worker: those run on
asyncio's default executor, which the app's end joins, so quitting would wait for a
long job (a prefill, a generation in llama.cpp) to end. Quitting asks the job to stop
and leaves when it has, or after a short grace without it (``Lifecycle``):
:attr:`Jobs.running` then tells the command to leave the process at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from loomterm.tree import Node
from loomterm.tui import ops

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor

Job = Callable[[], None]
ENGINE = "loomterm-engine"  # the worker thread's name


class Jobs:
    """The engine worker's queue and everything that waits on it."""

    @dataclass
    class Started(Message):
        """The worker picked up a job."""

        label: str

    @dataclass
    class Finished(Message):
        """The worker finished a job (whatever its outcome)."""

        label: str

    @dataclass
    class Failed(Message):
        """A job raised. ``error`` is shown as one line; the app keeps running."""

        label: str
        error: BaseException

    def __init__(self, app: Editor) -> None:
        self.app = app
        self.queue: queue.SimpleQueue[tuple[str, Job] | None] = queue.SimpleQueue()
        self.in_flight = 0
        self.cancel = threading.Event()
        """Set to stop a running generation or weave (escape, typing over it, quit)."""
        self.interrupt = threading.Event()
        """Set by escape while the model reads a long text (an edit near the top, say):
        the engine stops between two chunks (``Loom.interrupt``). Cleared per job."""
        self.deferred: list[tuple[Callable[[], None], bool]] = []
        self.locks = 0  # reasons the document refuses edits just now
        self.locked: set[str] = set()  # labels of queued jobs holding a lock
        self.running: str | None = None
        """The label of the job the worker runs now (None between jobs); read from the
        UI thread and, after the app has ended, by the command."""
        self.thread: threading.Thread | None = None
        self.low: list[threading.Event] = []
        """Cancel events of low-priority jobs queued or running (thinking ahead): any
        other job, and anything waiting for the engine, sets them (``give_way``)."""

    # -- the worker ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker (once, when the app mounts)."""
        self.thread = threading.Thread(target=self.loop, name=ENGINE, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop generating and let the worker end once its job is done (not waited
        for: see the module's docstring)."""
        self.cancel.set()
        self.interrupt.set()
        self.give_way()
        self.queue.put(None)

    def loop(self) -> None:
        """In the worker: run submitted jobs one at a time until told to stop."""
        while True:
            item = self.queue.get()
            if item is None:
                return
            label, job = item
            self.interrupt.clear()  # an escape meant for an earlier job stops nothing
            self.running = label
            self.app.post_message(Jobs.Started(label))
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - reported to the user, app goes on
                self.app.post_message(Jobs.Failed(label, exc))
            finally:
                self.running = None
                self.app.post_message(Jobs.Finished(label))

    # -- submitting --------------------------------------------------------------------
    def submit(
        self, label: str, job: Job, lock: bool = False, low: threading.Event | None = None
    ) -> None:
        """Queue model work for the worker. ``lock`` holds edits back until the job is
        done (its result replaces the document, which would drop the typing). ``low``:
        the job is low priority and stops when that event is set, which the next job
        submitted (or waited for) does; without it, low-priority work gives way now."""
        self.give_way()
        if low is not None:
            self.low.append(low)
        self.in_flight += 1
        if lock:
            self.lock()
            self.locked.add(label)
        self.queue.put((label, job))

    def give_way(self) -> None:
        """Stop low-priority work (it ends within one token): real work comes."""
        for event in self.low:
            event.set()
        self.low.clear()

    def set_meta(self, node: Node, **changes: object) -> None:
        """Change ``node``'s meta (bookmark, hidden, rating, blind) as a job, so the
        session saves it."""
        loom = self.app.loom

        def job() -> None:
            ops.set_meta(loom, node, **changes)

        self.submit("meta", job)

    def lock(self) -> None:
        """One more reason for the document to refuse edits."""
        self.locks += 1
        self.app.view.locked = True

    def unlock(self) -> None:
        self.locks = max(0, self.locks - 1)
        self.app.view.locked = self.locks > 0

    @property
    def busy(self) -> bool:
        """A job is queued or running, or a generation has not ended."""
        return self.in_flight > 0 or self.app.generating

    def finished(self, label: str) -> None:
        """On the UI thread, when the job ``label`` has ended (however it ended)."""
        self.in_flight = max(0, self.in_flight - 1)
        if label in self.locked:
            self.locked.discard(label)
            self.unlock()
        self.app.status_line.soon()
        self.drain()

    # -- when idle ---------------------------------------------------------------------
    def when_idle(
        self, action: Callable[[], None], *, sync: bool = True, stop: bool = False
    ) -> None:
        """Run ``action`` once no job is in flight (and, with ``sync``, once the engine
        has the typed text). ``stop``: the action takes the document elsewhere (another
        branch, node, hit or session): a running generation is stopped first, and keys
        typed after it are held until it has run, so they land where it put the caret,
        not in the text it leaves (the engine may first have the typing before it).
        Low-priority work gives way at once."""
        self.give_way()
        if stop:
            if self.app.generating:
                self.cancel.set()
            self.lock()
            moved = action

            def action() -> None:
                try:
                    moved()
                finally:
                    self.unlock()

        self.deferred.append((action, sync))
        self.drain()

    def drain(self) -> None:
        """Run what waits for the engine, in order, while it stays idle; typed text goes
        to the engine first where the next action needs it."""
        app = self.app
        while self.deferred and not self.busy:
            action, sync = self.deferred[0]
            if sync and app.typing.waiting():
                app.typing.start()
                return
            self.deferred.pop(0)
            action()
        if not self.busy and app.typing.is_due():
            app.typing.start()

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing waiting."""
        return not self.busy and not self.deferred
