"""One decode step captured as a CUDA graph over the working buffer, replayed every
step (``kernels.step``'s docstring says how, and that this path has not run on a GPU).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from loomterm.engine.kernels.step import DecodeStep


class StepGraph:
    """One captured step for ``batch`` rows over the current buffer."""

    def __init__(self, step: DecodeStep, batch: int, pool) -> None:
        self.step = step
        device = step.device
        work = step.work
        capacity = work.capacity
        self.batch = batch
        self.buffer: weakref.ref | None = None  # the buffer tensor whose tail was zeroed
        self.ids = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.positions = torch.full((batch, 1), work.length, dtype=torch.long, device=device)
        self.column = torch.tensor([work.length], dtype=torch.long, device=device)
        self.columns = torch.arange(capacity, device=device)
        self.capacity = capacity
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool
        self.logits: torch.Tensor | None = None
        self.captured = False

    def _body(self) -> torch.Tensor:
        neg = torch.finfo(torch.float32).min
        mask = torch.where(self.columns > self.column, neg, 0.0).float()  # (T,)
        return self.step.run(self.ids, self.positions, self.column, self.capacity, mask)

    def _load(self, fed: torch.Tensor, length: int) -> None:
        self.ids.copy_(fed.view(-1, 1))
        self.positions.fill_(length)
        self.column.fill_(length)

    def _clear_tail(self, length: int) -> None:
        """Masked columns must hold numbers, not whatever memory a new buffer got: zero
        them once per buffer tensor (a reallocated buffer can come back at the same
        address and shape, and so to this graph)."""
        buf = self.step.work.buf
        if self.buffer is None or self.buffer() is not buf:
            buf[:, :, : self.batch, :, length:].zero_()
            self.buffer = weakref.ref(buf)

    def replay(self, fed: torch.Tensor, length: int) -> torch.Tensor:
        self._clear_tail(length)
        self._load(fed, length)
        if not self.captured:
            # Warm up on a side stream (as torch.cuda.graphs requires), then capture;
            # each run writes this step's KV at ``length``, the same values each time.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._body()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(self.graph, pool=self.pool):
                self.logits = self._body()
            self.captured = True
        self.graph.replay()
        return self.logits.clone()  # the static output is overwritten by the next replay
