"""Keystroke-to-screen latency while typing at 30 keys per second on a 2,000-token
document, with the real engine (the tiny seeded model) syncing at every pause.

Not a test (timings depend on the machine): run it by hand, one thread::

    OMP_NUM_THREADS=1 python -m tests.tui.measure_typing

The document is a 2,000-token path of 20 nodes (the writer's and the model's in turn).
The editor runs headless at 120x40 with the branch pane shown. Words of five keys are
typed at the end at 30 keys/s, with a 0.6 s pause after every fourth word (longer
than the sync delay: the engine gets the text then, as a writer's pauses give it).
For each key: from the moment it is posted to the end of the first frame that shows
it. Median and 95th percentile in milliseconds, and the tree's node count after.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

DOC_TOKENS = 2000
NODES = 20
RATE = 30.0  # keys per second
WORDS = 40
PAUSE = 0.6
SIZE = (120, 40)


def build(folder: Path):
    import torch

    from loomterm.engine import Loom
    from loomterm.engine.models.load import load_model
    from loomterm.tree import Origin
    from tests.tiny_models import CORPUS, build_tiny_llama

    torch.set_num_threads(1)
    model_dir = build_tiny_llama(folder / "tiny-llama")
    loom = Loom.from_loaded(load_model(str(model_dir), device="cpu"), n_ctx=4096)
    text = ""
    while len(loom.encode(text)) < DOC_TOKENS + 10:
        text += " ".join(CORPUS) + "\n"
    tokens = loom.encode(text)[:DOC_TOKENS]
    per = DOC_TOKENS // NODES
    parent = loom.root
    for i in range(NODES):
        chunk = tokens[i * per : (i + 1) * per]
        origin = Origin.MODEL if i % 2 else Origin.USER
        parent = loom.tree.add(parent, chunk, origin, logprobs=[-0.5] * len(chunk))
    loom.cursor = parent
    loom.next_logits(parent)  # the KV of the document, as after a session's first read
    return loom


async def measure(loom) -> tuple[list[float], int]:
    from textual import events

    from loomterm.tui.app import LoomApp

    app = LoomApp(loom, show_speed=False)
    latencies: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.0)
        screen = app.screen
        frames: list[float] = []
        original = screen._compositor_refresh  # noqa: SLF001 - the frame hook

        def frame() -> None:
            original()
            frames.append(time.perf_counter())

        screen._compositor_refresh = frame  # noqa: SLF001
        applied: list[float] = []  # when each key's edit reached the document
        insert = app.doc.insert

        def timed_insert(text: str) -> None:
            insert(text)
            applied.append(time.perf_counter())

        app.doc.insert = timed_insert
        posted: list[float] = []
        start = time.perf_counter()
        n = 0
        for word in range(WORDS):
            for char in "word "[:4] + " ":
                due = start + n / RATE
                while time.perf_counter() < due:
                    await asyncio.sleep(0.001)
                key = "space" if char == " " else char
                posted.append(time.perf_counter())
                app.post_message(events.Key(key, char))
                n += 1
            if word % 4 == 3:
                await asyncio.sleep(PAUSE)
                start += PAUSE
        await pilot.pause(1.0)
        for sent, done in zip(posted, applied, strict=False):
            shown = next((f for f in frames if f >= done), None)
            if shown is not None:
                latencies.append((shown - sent) * 1000)
        while app.busy or app.doc.dirty:
            await pilot.pause(0.1)
    return latencies, len(loom.tree.nodes)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        loom = build(Path(folder))
        latencies, nodes = asyncio.run(measure(loom))
    print(
        f"{len(latencies)} keys at {RATE:.0f}/s on {DOC_TOKENS} tokens: "
        f"p50 {statistics.median(latencies):.1f} ms, p95 {percentile(latencies, 0.95):.1f} ms, "
        f"max {max(latencies):.1f} ms; {nodes} nodes after ({NODES + 1} before)"
    )


if __name__ == "__main__":
    sys.exit(main())
