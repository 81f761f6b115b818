"""Key-to-screen latency of the tree map on a 21,845-node tree.

Not a test (timings depend on the machine): run it by hand::

    python -m tests.tui.measure_map

It builds the tiny seeded model's Loom and hangs a complete tree on it without
generating (4 children a node, 7 levels: 21,845 nodes with the root), the document on a
leaf a third of the way down, and runs the editor headless at 120x40. For each key:

- *work*: from the key's handler starting to the end of the first frame rendered after
  it (the handler, layout and the strips the terminal would get);
- *frame*: from the key event being posted to the end of that frame (it includes the
  wait for Textual's 60 fps frame clock);
- *cpu*: the UI thread's CPU time over the *work* span, which other processes on a
  busy machine cannot inflate.

Keys: *open* (alt+o, the map opened on a tree it has not laid out, then escape), *move*
(up, down, left, right: siblings, parent, child), *jump* (pagedown, pageup, end, home,
c). Median and 95th percentile, in milliseconds.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.tui.key_timing import KeyClock, spread

SIZE = (120, 40)
DEPTH = 7
BRANCHING = 4


def build(model_dir: Path):
    from loomterm.engine import Loom
    from loomterm.engine.models.load import load_model
    from loomterm.tree import Origin

    loom = Loom.from_loaded(load_model(str(model_dir), device="cpu"), n_ctx=512)
    tokens = loom.encode(" The weaver pulled a thread.", at_start=False)
    level = [loom.root]
    for _ in range(DEPTH):
        level = [loom.tree.add(n, tokens, Origin.MODEL) for n in level for _ in range(BRANCHING)]
    loom.cursor = level[len(level) // 3]
    assert len(loom.tree.nodes) == 21_845
    return loom


async def measure(loom) -> dict[str, tuple[float, ...]]:
    from textual.screen import Screen

    from loomterm.tui.app import LoomApp
    from loomterm.tui.widgets.tree_map import TreeMap, TreeMapScreen

    clock = KeyClock()
    Screen._compositor_refresh = clock.framed(Screen._compositor_refresh)  # noqa: SLF001
    TreeMap.move_to = clock.timed(TreeMap.move_to)
    app = LoomApp(loom, show_speed=False)
    app.actions["tree_map"] = clock.timed(app.actions["tree_map"])  # the key's controller method
    results: dict[str, tuple[float, ...]] = {}
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.0)

        work, total, busy = [], [], []
        for _ in range(20):
            app.tree_map.changed("add")  # a new version: the map lays out again
            w, t, c = await clock.press(app, pilot, "alt+o", spins=2000)
            work.append(w)
            total.append(t)
            busy.append(c)
            assert isinstance(app.screen, TreeMapScreen)
            await pilot.press("escape")
            await pilot.pause(0.05)
        results["open (alt+o, a new layout)"] = (*spread(busy), *spread(work), *spread(total))
        await pilot.press("alt+o")
        await pilot.pause(0.2)
        for name, keys in (
            ("move (up, down, left, right)", ["up", "down", "left", "right"] * 15),
            (
                "jump (pagedown, pageup, end, home, c)",
                ["pagedown", "pageup", "end", "home", "c"] * 12,
            ),
        ):
            work, total, busy = await clock.press_all(app, pilot, keys, spins=2000)
            results[name] = (*spread(busy), *spread(work), *spread(total))
    return results


def main() -> int:
    import os

    from tests.tiny_models import build_tiny_llama

    with tempfile.TemporaryDirectory() as folder:
        loom = build(build_tiny_llama(Path(folder) / "tiny-llama"))
        results = asyncio.run(measure(loom))
    print(f"tree: {len(loom.tree.nodes):,} nodes; terminal {SIZE[0]}x{SIZE[1]}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'key':<40} {'cpu p50':>8} {'p95':>6} {'work p50':>9} {'p95':>6} "
        f"{'frame p50':>10} {'p95':>6}  (ms)"
    )
    for name, (c50, c95, w50, w95, f50, f95) in results.items():
        print(f"{name:<40} {c50:8.2f} {c95:6.2f} {w50:9.2f} {w95:6.2f} {f50:10.2f} {f95:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
