"""Decoding on a busy CPU: the same greedy decode quiet and with one process spinning on a
core beside it (started and stopped by the bench itself), same run, same model, on
torch and on llama.cpp, with the default threads (``engine.threads.default_threads``)
and with a thread per core (the old default). The ratio is contended over quiet: the
target is to keep at least half the quiet rate with the default threads.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import torch

from loomterm.bench import peer
from loomterm.bench.common import make_loom
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import median

CONTENDED = "Busy CPU"
CONTENDED_NOTE = "greedy decode with one process spinning on a core beside it; baseline: the same decode quiet, same run"
# Spins until stopped, or until the bench that started it (its parent, named by pid so
# that a parent gone before the spinner started counts too) is gone: killed, not stopped.
SPIN = "import os\nwhile os.getppid() == {parent}:\n    for _ in range(100000): pass"


@contextlib.contextmanager
def busy_core() -> Iterator[None]:
    """One process spinning on a core for the duration (ours: killed on leaving)."""
    spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(parent=os.getpid())])
    try:
        time.sleep(0.3)  # running before the clock starts
        yield
    finally:
        spinner.kill()
        spinner.wait()


def thread_counts() -> list[tuple[int, str]]:
    """(threads, label): the default, and a thread per core where that differs."""
    from loomterm.engine.threads import default_threads, physical_cores

    chosen, per_core = default_threads("llama.cpp"), physical_cores()
    counts = [(chosen, "default")]
    if per_core != chosen:
        counts.append((per_core, "a thread per core"))
    return counts


def contended_rows(loaded, prompt: list[int], new_tokens: int, reps: int, log) -> list[Row]:
    """Quiet and contended decode rates, torch then llama.cpp (where it is built and the
    model has a GGUF file), for each of ``thread_counts``."""
    rows: list[Row] = []
    before = torch.get_num_threads()
    try:
        for threads, label in thread_counts():
            torch.set_num_threads(threads)
            loom = make_loom(loaded, drafting="off")
            rows.append(_row(loom, "torch", threads, label, prompt, new_tokens, reps, log))
            rows += _llama_row(loaded, threads, label, prompt, new_tokens, reps, log)
    finally:
        torch.set_num_threads(before)
    return rows


def _llama_row(loaded, threads, label, prompt, new_tokens, reps, log) -> list[Row]:
    from loomterm.engine.llamacpp import binding

    gguf = peer.gguf_of(loaded)
    if gguf is None or loaded.device.type != "cpu" or not binding.available():
        return []
    from loomterm.engine import Loom
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    runner = LlamaCppRunner(gguf, n_ctx=len(prompt) + new_tokens + 64, threads=threads)
    try:
        return [_row(Loom(runner), "llama.cpp", threads, label, prompt, new_tokens, reps, log)]
    finally:
        runner.close()


def _row(loom, backend, threads, label, prompt, new_tokens, reps, log) -> Row:
    log(f"busy CPU: {backend}, {threads} thread(s), quiet then with a core busy")
    node = loom.append_tokens(loom.root, prompt)
    loom.generate(node, 4, temperature=0)  # warm-up (the prompt's KV stays)

    def rates() -> list[float]:
        found = []
        for _ in range(max(1, reps)):
            loom.generate(node, new_tokens, temperature=0)
            found.append(loom.last_result.tokens_per_second)
        return found

    quiet = rates()
    with busy_core():
        busy = rates()
    q, b = median(quiet), median(busy)
    return Row(
        CONTENDED,
        f"{backend}, {threads} thread{'s' if threads > 1 else ''} ({label})",
        q,
        b,
        "tok/s",
        ratio(b, q),
        ">=0.5" if label == "default" else "",
        note=f"{new_tokens} tokens; quiet {q:.1f}, contended {b:.1f} tok/s",
        extra={"quiet_tok_s": quiet, "contended_tok_s": busy, "threads": threads},
    )
