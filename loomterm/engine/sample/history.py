"""What the penalties and DRY read: each row's tokens so far, in one preallocated buffer.

A decoder starts one :class:`PenaltyHistory` per generation from what the model saw
before it (the path, typed text included, or the assembled context with memory and
notes: ``ContextKV.history``) and pushes each chosen token; the samplers read a view of
the first ``length`` columns. Nothing is copied per step, so a step's cost does not
grow with the path.
"""

from __future__ import annotations

import torch

from loomterm.engine.sample.params import SamplingParams


class PenaltyHistory:
    """(rows, seen + room) token ids written in place, read through :attr:`view`.

    Attributes:
        length: Columns written so far (the prefix seen plus the tokens pushed).
        start: Columns of the prefix seen before the generation.
    """

    def __init__(self, seen: list[int], rows: int, room: int, device: torch.device) -> None:
        self.start = self.length = len(seen)
        self.buf = torch.empty((rows, len(seen) + room), dtype=torch.long, device=device)
        self.buf[:, : len(seen)] = torch.tensor(seen, dtype=torch.long, device=device)

    @classmethod
    def start_for(
        cls, params: SamplingParams, seen: list[int], rows: int, room: int, device: torch.device
    ) -> PenaltyHistory | None:
        """A history when ``params`` read one (penalties, DRY), else None."""
        return cls(seen, rows, room, device) if params.uses_history else None

    @property
    def view(self) -> torch.Tensor:
        """(rows, length): what the samplers read."""
        return self.buf[:, : self.length]

    def push(self, tokens: torch.Tensor | int) -> None:
        """Append one token per row: (rows,) ids, or one id for every row."""
        self.buf[:, self.length] = tokens
        self.length += 1

    def cut(self, generated: int) -> None:
        """Keep the prefix and the first ``generated`` tokens pushed (a take-back)."""
        self.length = self.start + generated


def history_view(history: PenaltyHistory | None) -> torch.Tensor | None:
    """The samplers' ``history`` argument: the view, or None without a history."""
    return history.view if history is not None else None
