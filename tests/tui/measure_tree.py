"""The branch pane's cost per key on a 20,000-node tree.

Not a test (timings depend on the machine): run it by hand::

    python -m tests.tui.measure_tree

It builds the tiny seeded model's Loom and hangs 20,000 nodes on it without generating
(tree nodes holding a sentence's tokens: a 2,000-node story, then runs of single
children between branch points of two or three), runs the editor headless at 120x40
with the branch pane focused, and times in the UI thread:

- *rebuild*: laying out every row again (any change to the tree, space, right, left),
  plus drawing the visible rows;
- *down*: a cursor move and the rows it draws again.

Median over repeats, in milliseconds.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

NODES = 20_000
STORY = 2_000
REPEATS = 15


def build(loom) -> None:
    from loomterm.tree import Origin

    tokens = loom.encode(" The weaver pulled another thread through the loom.", at_start=False)
    rng = random.Random(7)
    node = loom.root
    made = 0
    for _ in range(STORY):
        node = loom.tree.add(node, tokens, Origin.USER)
        made += 1
    frontier = [node]
    while made < NODES:
        parent = frontier.pop(rng.randrange(len(frontier)))
        kids = 1 if rng.random() < 0.8 else rng.choice((2, 3))
        for _ in range(kids):
            child = loom.tree.add(parent, tokens, Origin.MODEL)
            frontier.append(child)
            made += 1
    loom.cursor = frontier[-1]


def drawn(tree) -> None:
    """Draw every visible row (what the frame after a key costs the pane)."""
    for y in range(tree.scrollable_content_region.height):
        tree.render_line(y)


async def measure(model_dir: Path) -> None:
    from loomterm.engine import Loom
    from loomterm.engine.models.load import load_model
    from loomterm.tui.app import LoomApp

    loom = Loom.from_loaded(load_model(str(model_dir)), n_ctx=512)
    build(loom)
    app = LoomApp(loom, show_speed=False, session_name="measure", export_dir=Path("."))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        await pilot.press("f4")
        await pilot.pause(0.2)
        tree = app.branches
        rebuild, down = [], []
        for _ in range(REPEATS):
            start = time.perf_counter()
            tree.rebuild(loom.root)
            drawn(tree)
            rebuild.append(time.perf_counter() - start)
        for _ in range(REPEATS):
            start = time.perf_counter()
            tree.action_cursor(1)
            drawn(tree)
            down.append(time.perf_counter() - start)
        print(f"rows {len(tree.rows)} for {NODES + 1} nodes")
        print(f"rebuild (a change, space, right, left): {statistics.median(rebuild) * 1e3:.1f} ms")
        print(f"down: {statistics.median(down) * 1e3:.2f} ms")


def main() -> None:
    from tests.tiny_models import build_tiny_llama

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(measure(build_tiny_llama(Path(folder))))


if __name__ == "__main__":
    sys.exit(main())
