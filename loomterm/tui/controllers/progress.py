"""The engine's long work in the status bar: reading a long text (the prefill; escape
stops it between two chunks) and loading a model while a session opens."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from textual.message import Message

from loomterm.tui.controllers.controller import Controller
from loomterm.tui.controllers.generation import STOPPING


@dataclass(eq=False, repr=False)
class Progress(Controller):
    """What the engine reports it is reading or loading, for the status bar."""

    @dataclass
    class Loading(Message):
        """Long work other than reading tokens (a model loading, converting, quantizing
        while a session opens): the status bar shows its stage and how far it is."""

        stage: str
        done: int
        total: int | None

    @dataclass
    class Prefill(Message):
        """The model has read ``done`` of the ``total`` tokens it must read (a long edit,
        a generation far from the cache): the status bar shows it, escape stops it."""

        done: int
        total: int

    # Reading in progress: (done, total, done at the first report, its time).
    prefill: tuple[int, int, int, float] | None = field(default=None, init=False)
    # stage, done, total
    loading: tuple[str, int, int | None] | None = field(default=None, init=False)

    def report(self, stage: str, done: int, total: int | None) -> None:
        """Runner and model-loading progress, on the worker thread: to the UI as a
        message."""
        if stage == "prefill":
            self.app.post_message(Progress.Prefill(done, total))
        else:
            self.app.post_message(Progress.Loading(stage, done, total))

    def load(self, stage: str, done: int, total: int | None) -> None:
        """Model-loading progress, from the worker: to the status bar."""
        self.app.post_message(Progress.Loading(stage, done, total))

    def loaded(self, message: Progress.Loading) -> None:
        """A model-loading report arrived."""
        finished = message.total is not None and message.done >= message.total
        self.loading = None if finished else (message.stage, message.done, message.total)
        self.app.status_line.soon()

    def loading_state(self) -> str:
        """``loading g: load 12/30`` or, for a stage of unknown length, its seconds."""
        if self.loading is None:
            return ""
        stage, done, total = self.loading
        amount = f"{done:,}/{total:,}" if total else f"{done} s"
        return f"{stage} {amount}\u2026"

    def read(self, message: Progress.Prefill) -> None:
        """A prefill report arrived: escape stops the reading from now on."""
        app = self.app
        previous = self.prefill
        if message.done >= message.total:
            # The read is over (a server reports 12/12 as it starts streaming): from
            # here the status bar shows the generation and its rate, not the read.
            self.prefill = None
            if previous is not None:
                app.refresh_bindings()
            app.status_line.soon()
            return
        if previous is None or message.done < previous[0] or message.total != previous[1]:
            self.prefill = (message.done, message.total, message.done, time.monotonic())
            app.refresh_bindings()  # escape now stops the reading
        else:
            self.prefill = (message.done, message.total, previous[2], previous[3])
        app.status_line.soon()

    def prefill_state(self) -> str:
        """``reading 4,096/16,000 tokens · 812 tok/s · esc stops`` while reading."""
        if self.prefill is None:
            return ""
        if self.jobs.interrupt.is_set():  # escape was heard: the chunk under way ends
            return STOPPING
        done, total, first, since = self.prefill
        text = f"reading {done:,}/{total:,} tokens"
        seconds = time.monotonic() - since
        if done > first and seconds > 0:
            text += f" \u00b7 {(done - first) / seconds:,.0f} tok/s"
        return text + " \u00b7 esc stops"

    def job_finished(self) -> None:
        """A job ended: whatever it was reading or loading is over."""
        if self.prefill is not None:
            self.prefill = None
            self.app.refresh_bindings()
        self.loading = None
