"""Progress reports for long work (downloads, model conversion, loading).

Standard library only, so the command line and the TUI can both use it.

The protocol is one callable, ``progress(stage, done, total)``:

- ``stage`` names the work: "download", "extract", "dequantize", "save", "load", ...
- ``total`` is the amount of work when it is known (bytes, tensors), and ``done`` how much
  of it is finished. When the amount is unknown, ``total`` is None and ``done`` counts
  whole seconds since the stage began (a heartbeat).
- Every stage that finishes ends with one call where ``done == total`` (for a timed stage
  both are the elapsed seconds). A stage that fails ends without it.

Callbacks may be called from a helper thread (the heartbeat), so a UI must hand them over
to its own thread (Textual: ``call_from_thread``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from loomterm.sanitize import safe_line

ProgressCallback = Callable[[str, int, "int | None"], None]

HEARTBEAT_S = 1.0


class Progress:
    """Wraps an optional callback: serialises calls and adds heartbeats for timed stages."""

    def __init__(self, callback: ProgressCallback | None = None):
        self._callback = callback
        self._lock = threading.Lock()

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if self._callback is not None:
            with self._lock:
                self._callback(stage, done, total)

    @contextmanager
    def timed(self, stage: str) -> Iterator[Callable[[int, int | None], None]]:
        """Report a stage whose length is unknown at the start.

        Ticks the elapsed seconds each second. Yields ``count(done, total)``: once the work
        can be counted after all (e.g. a per-tensor loop deep inside a library), counted
        reports replace the ticks. Ends with one ``(stage, n, n)`` call.
        """
        start = time.monotonic()
        stop = threading.Event()
        counted: list[int | None] = []  # the last counted total, once counting began

        def count(done: int, total: int | None) -> None:
            counted[:] = [total]
            if total is None or done < total:  # the final call comes once, at the end
                self(stage, done, total)

        def tick() -> None:
            while not stop.wait(HEARTBEAT_S):
                if not counted:
                    try:
                        self(stage, int(time.monotonic() - start), None)
                    except Exception:  # noqa: BLE001 - see below
                        # The callback refused (a load that was abandoned raises): the
                        # stage's own thread hears it at its next report. Raised here,
                        # it would only print a traceback over the user's terminal.
                        return

        self(stage, 0, None)
        thread = None
        if self._callback is not None:
            thread = threading.Thread(target=tick, name=f"loomterm-{stage}", daemon=True)
            thread.start()
        try:
            yield count
        finally:
            stop.set()
            if thread is not None:
                thread.join()
        final = counted[0] if counted and counted[0] is not None else None
        if final is None:
            final = int(time.monotonic() - start)
        self(stage, final, final)


class _ProgressLine:
    """One status line on stderr, redrawn in place with carriage returns.

    When stderr is not a terminal (CI logs, pipes) only each finished stage is printed,
    so logs do not fill with redraws.
    """

    BAR_WIDTH = 24

    def __init__(self) -> None:
        self._stage: str | None = None
        self._open = False  # a line is drawn and not yet ended with a newline
        self._started = 0.0
        self._last_draw = 0.0
        self._last_text = ""
        self._timed = False  # the current stage reported an unknown total

    def update(self, stage: str, done: int, total: int | None) -> None:
        stream = sys.stderr
        now = time.monotonic()
        if stage != self._stage:
            self.close()
            self._stage, self._started, self._timed = stage, now, False
        self._timed = self._timed or total is None
        finished = total is not None and done >= total
        text = safe_line(self._render(stage, done, total, now - self._started, finished))
        if not stream.isatty():
            if finished:
                stream.write(text + "\n")
                stream.flush()
                self._stage = None
            return
        # Redraw at most ~20 times a second, but always draw the final state.
        if not finished and (text == self._last_text or now - self._last_draw < 0.05):
            return
        pad = " " * max(0, len(self._last_text) - len(text))
        stream.write("\r" + text + pad)
        self._last_text, self._last_draw, self._open = text, now, True
        if finished:
            stream.write("\n")
            self._open, self._stage, self._last_text = False, None, ""
        stream.flush()

    def close(self) -> None:
        """End a half-drawn line (a stage that failed or was cut short)."""
        if self._open:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self._open, self._stage, self._last_text = False, None, ""

    def _render(
        self, stage: str, done: int, total: int | None, elapsed: float, finished: bool
    ) -> str:
        label = f"{stage:<11}"
        if total is None:
            return f"{label} working... {done}s"
        if finished and self._timed:
            size = f", {total / (1 << 20):.1f} MiB" if total >= 1 << 20 else ""
            return f"{label} done in {elapsed:.1f}s{size}"
        fraction = 1.0 if total <= 0 else min(1.0, done / total)
        filled = int(fraction * self.BAR_WIDTH)
        bar = "#" * filled + "-" * (self.BAR_WIDTH - filled)
        suffix = f" in {elapsed:.1f}s" if finished else ""
        return f"{label} [{bar}] {fraction:4.0%}  {_amount(done, total)}{suffix}"


def _amount(done: int, total: int) -> str:
    if total >= 1 << 20:
        return f"{done / (1 << 20):.1f}/{total / (1 << 20):.1f} MiB"
    return f"{done}/{total}"


_line = _ProgressLine()


def print_progress(stage: str, done: int, total: int | None) -> None:
    """A ``ProgressCallback`` that draws a one-line progress bar on stderr."""
    _line.update(stage, done, total)


def end_progress_line() -> None:
    """Finish any half-drawn progress line, e.g. before printing an error."""
    _line.close()
