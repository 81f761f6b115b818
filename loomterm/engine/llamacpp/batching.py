"""Whether a step's sibling tokens go to llama.cpp as one batch or as one decode each.

One ``llama_decode`` of n tokens in n sequences reads each weight once for all of them,
so it should cost less than n single-token decodes. On a CPU it does not always:
llama.cpp multiplies one row and several rows by different kernels, and for some
weight types the several-row kernel is the slower one per token (the default model's
Q4_1 file on this project's AVX-512 machine, one thread: 4 rows cost 4.5x one row, 2
rows 2.8x). :class:`BatchCosts` keeps what each way has cost per token in this runner,
measured in its generations, and takes the cheaper. Each way is tried before it is
judged, and the costlier one again every ``RETRY`` steps, so a change (a busy machine,
more siblings) is followed. Both ways give the same tokens up to llama.cpp's rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RETRY = 32  # steps between two tries of the way that cost more
WEIGHT = 0.25  # of the newest measurement in a running mean


@dataclass
class BatchCosts:
    """Seconds per token of a batch of ``rows`` tokens (by ``rows``) and of single
    decodes, as running means; ``batched`` says which way the next step goes."""

    batch: dict[int, float] = field(default_factory=dict)  # rows -> s/token
    single: float | None = None
    steps: int = 0

    def batched(self, rows: int) -> bool:
        """Whether ``rows`` (> 1) tokens go as one batch this step."""
        self.steps += 1
        batch = self.batch.get(rows)
        if batch is None:
            return True
        if self.single is None:
            return False
        cheaper = batch <= self.single
        if self.steps % RETRY == 0:
            return not cheaper  # the other way again: costs change
        return cheaper

    def record(self, batched: bool, rows: int, seconds: float) -> None:
        """What a step of ``rows`` tokens cost, in ``seconds``, the way it went."""
        per_token = seconds / rows
        if batched:
            self.batch[rows] = _mean(self.batch.get(rows), per_token)
        else:
            self.single = _mean(self.single, per_token)


def _mean(old: float | None, new: float) -> float:
    return new if old is None else (1 - WEIGHT) * old + WEIGHT * new
