"""Prefill figures: what keeping typed tokens' probabilities costs a prefill."""

from __future__ import annotations

from loomterm.bench.common import make_loom
from loomterm.bench.report import Row
from loomterm.bench.timing import median, timed

PREFILL = "Prefill"
PREFILL_NOTE = "typing or pasting a document; baseline: the same prefill without per-token records"


def record_cost(loaded, corpus: list[int], length: int, reps: int, log) -> list[Row]:
    """Append ``length`` typed tokens to a fresh loom, with the log-probability and
    top-10 of every token kept (the default) and without; a fresh loom per run."""
    log(f"prefill of {length} typed tokens, with and without their probabilities")
    tokens = corpus[:length]
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(reps):
        for keep in (False, True):
            loom = make_loom(loaded)
            loom.runner.keep_records = keep
            took, node = timed(
                loom.runner.device, lambda loom=loom: loom.append_tokens(loom.root, tokens)
            )
            seconds[keep].append(took)
    without, with_records = median(seconds[False]), median(seconds[True])
    cost = (with_records / without - 1) * 100 if without > 0 else float("nan")
    return [
        Row(
            PREFILL,
            f"keep probabilities of {length} typed tokens",
            length / without,
            length / with_records,
            "tok/s",
            without / with_records,
            note=f"cost {cost:+.1f}%",
            extra={"cost_percent": cost},
        )
    ]
