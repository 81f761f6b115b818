"""Clocking keys in the headless editor: what ``measure_latency`` and ``measure_map`` share.

A :class:`KeyClock` wraps a key's handler (:meth:`KeyClock.timed`) and the screen's frame
hook (:meth:`KeyClock.framed`); :meth:`KeyClock.press` posts a key and gives, in
milliseconds, its *work* (handler start to the end of the first frame after it), its
*frame* (key posted to that frame's end) and the UI thread's *cpu* over the work span.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def spread(values: list[float]) -> tuple[float, float]:
    """Median and 95th percentile."""
    return statistics.median(values), percentile(values, 0.95)


class KeyClock:
    """When a key's handler began, when each frame finished after it, and the UI
    thread's CPU clock at those moments."""

    def __init__(self) -> None:
        self.frames: list[float] = []  # when each frame finished rendering
        self.started: list[float] = []  # when the key's handler began
        self.cpu: list[float] = []  # the UI thread's CPU clock at the handler's start, each frame

    def framed(self, refresh: Callable[..., None]) -> Callable[..., None]:
        """``refresh`` (the screen's frame hook), noting when each frame ends."""

        def frame(*args: Any) -> None:
            refresh(*args)
            self.frames.append(time.perf_counter())
            self.cpu.append(time.thread_time())

        return frame

    def timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` (a key's handler), noting when it begins."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.started.append(time.perf_counter())
            self.cpu.clear()
            self.cpu.append(time.thread_time())
            return method(*args, **kwargs)

        return wrapper

    async def press(self, app, pilot, key: str, spins: int) -> tuple[float, float, float]:
        """Post ``key`` and wait (``spins`` half-milliseconds at most) for the first frame
        after its handler: (work, frame, cpu) in milliseconds."""
        from textual import events

        await pilot.pause(0.03)  # every pending frame goes out first
        self.frames.clear()
        self.started.clear()
        self.cpu.clear()
        sent = time.perf_counter()
        await app._post_message(events.Key(key, None))  # noqa: SLF001
        for _ in range(spins):
            if self.started and any(f > self.started[0] for f in self.frames):
                break
            await asyncio.sleep(0.0005)
        shown = next(f for f in self.frames if f > self.started[0])
        # The CPU clock restarts at the handler: its next reading is that frame's.
        busy = self.cpu[1] - self.cpu[0] if len(self.cpu) > 1 else float("nan")
        return (shown - self.started[0]) * 1000, (shown - sent) * 1000, busy * 1000

    async def press_all(
        self, app, pilot, keys: list[str], spins: int
    ) -> tuple[list[float], list[float], list[float]]:
        """:meth:`press` each of ``keys``: the work, frame and cpu figures, in order."""
        work, total, busy = [], [], []
        for key in keys:
            w, t, c = await self.press(app, pilot, key, spins)
            work.append(w)
            total.append(t)
            busy.append(c)
        return work, total, busy
