"""Telling the user when decoding collapses: the recent rate of a generation against
the best this session has seen for the same model and batch size.

On a CPU shared with other work, decoding with a thread on every core can fall to a
tenth of its rate (each step waits for the thread that lost its core); nothing else
tells the user why the model is suddenly slow. ``Slowdown`` keeps the tokens of the
last ``WINDOW_S`` seconds of a generation; when their rate is below ``FRACTION`` of the
best windowed rate of this session (same key: the model and how many rows), it says
so, with what helps (``advice``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

FRACTION = 1 / 3  # slower than this part of the best: not noise, something took the CPU
WINDOW_S = 2.0  # the recent rate is measured over this long
MIN_TOKENS = 8  # fewer tokens in a window say nothing


class Slowdown:
    """The recent decode rate against the session's best. See the module docstring."""

    def __init__(self) -> None:
        self.best: dict[Hashable, float] = {}
        self.key: Hashable = None
        self.recent: float | None = None
        self.slow = False
        self._samples: deque[tuple[float, int]] = deque()

    def start(self, key: Hashable) -> None:
        """A generation begins (``key``: what its rate is comparable with)."""
        self.key = key
        self.recent = None
        self.slow = False
        self._samples.clear()

    def tokens(self, total: int, now: float) -> None:
        """``total`` tokens have come by ``now`` (monotonic seconds)."""
        samples = self._samples
        samples.append((now, total))
        while len(samples) > 2 and now - samples[1][0] >= WINDOW_S:
            samples.popleft()  # the oldest kept still begins a full window
        then, before = samples[0]
        if now - then < WINDOW_S or total - before < MIN_TOKENS:
            return
        self.recent = (total - before) / (now - then)
        best = max(self.best.get(self.key, 0.0), self.recent)
        self.best[self.key] = best
        self.slow = self.recent < FRACTION * best

    def advice(self, threads: int | None) -> str:
        """What the status bar says while slow: the fall, and what helps."""
        best = self.best.get(self.key, 0.0)
        what = f"slow: {self.recent or 0:.1f} tok/s, was {best:.1f}; the CPU is busy elsewhere"
        if threads is not None and threads > 1:
            return f"{what} (--threads 1 helps)"
        return what
