"""Key-to-screen latency of the editor on a 10,000-token document in a 1,000-node tree.

Not a test (timings depend on the machine): run it by hand::

    python -m tests.tui.measure_latency

It builds the tiny seeded model, a tree whose current path holds 10,000 tokens in 100
nodes, with 9 more branches at each of them (1,000 nodes), and runs the editor headless
at 120x40 with the branch pane shown. For each key it reports two figures:

- *work*: from the key event reaching the app to the end of the first frame rendered
  after it (handler, layout and the strips the terminal would get), that is the cost
  our code adds;
- *frame*: from the key event being posted to the end of that frame (it includes the
  wait for Textual's 60 fps frame clock);
- *cpu*: the UI thread's CPU time over the *work* span, which other processes on a
  busy machine cannot inflate.

Median and 95th percentile over many presses, in milliseconds.

``python -m tests.tui.measure_latency --busy [PHASE ...]`` measures instead in a real
terminal while the model is busy: a first-load conversion, a long prefill, a slow
generation on each runner (``tests/tui/measure_busy.py`` says how).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from tests.tui.key_timing import KeyClock, spread

PATH_NODES = 100
TOKENS_PER_NODE = 100
BRANCHES_PER_NODE = 9
BRANCH_TOKENS = 20
SIZE = (120, 40)


def build(folder: Path):
    from loomterm.engine import Loom
    from loomterm.engine.models.load import load_model
    from loomterm.tree import Origin
    from tests.tiny_models import CORPUS, build_tiny_llama

    model_dir = build_tiny_llama(folder / "tiny-llama")
    loom = Loom.from_loaded(load_model(str(model_dir), device="cpu"), n_ctx=512)
    text = ""
    while True:
        text += " ".join(CORPUS) + "\n"
        if len(loom.encode(text)) > PATH_NODES * TOKENS_PER_NODE + 10:
            break
    tokens = loom.encode(text)
    tree = loom.tree
    main = []
    parent = loom.root
    for i in range(PATH_NODES):
        chunk = tokens[i * TOKENS_PER_NODE : (i + 1) * TOKENS_PER_NODE]
        node = tree.add(
            parent, chunk, Origin.MODEL if i % 2 else Origin.USER, logprobs=[-0.5] * len(chunk)
        )
        main.append(node)
        parent = node
    for i, node in enumerate(main):
        for b in range(BRANCHES_PER_NODE):
            start = (i * 7 + b * 13) % (len(tokens) - BRANCH_TOKENS)
            tree.add(node.parent, tokens[start : start + BRANCH_TOKENS], Origin.MODEL)
    loom.cursor = main[-1]
    assert len(tree.nodes) - 1 == PATH_NODES * (1 + BRANCHES_PER_NODE)
    assert main[-1].end == PATH_NODES * TOKENS_PER_NODE
    return loom, main


async def measure(loom, main) -> dict[str, tuple[float, ...]]:
    from loomterm.tui.app import LoomApp

    app = LoomApp(loom, show_speed=False)
    results: dict[str, tuple[float, ...]] = {}
    clock = KeyClock()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.0)
        screen = app.screen
        view = app.view
        frame_hook = screen._compositor_refresh  # noqa: SLF001 - the frame hook
        screen._compositor_refresh = clock.framed(frame_hook)  # noqa: SLF001
        for name in (
            "action_cursor_left",
            "action_cursor_right",
            "action_cursor_up",
            "action_cursor_down",
        ):
            setattr(view, name, clock.timed(getattr(view, name)))
        app.navigation.sibling = clock.timed(app.navigation.sibling)

        async def run(name: str, keys: list[str]) -> None:
            work, total, busy = await clock.press_all(app, pilot, keys, spins=500)
            results[name] = (statistics.median(busy), *spread(work), *spread(total))

        await run("cursor left/right (end of document)", ["left", "right"] * 50)
        app.doc.move_to(app.doc.length // 2)
        view.caret_moved()
        await run("cursor up/down (middle of document)", ["up", "down"] * 50)

        # Sibling switches at three depths: near the end, in the middle, at the start.
        for depth in (PATH_NODES - 1, PATH_NODES // 2, 1):
            app.navigation.show_node(main[-1])
            await pilot.pause(0.3)
            app.doc.move_to(app.doc.end_of(main[depth]))
            view.caret_moved()
            await pilot.pause(0.1)
            await run(
                f"sibling switch, node {depth} ({main[depth].end:,} tokens in)",
                ["alt+right", "alt+left"] * 20,
            )
    return results


def main() -> int:
    if "--busy" in sys.argv[1:]:
        from tests.tui import measure_busy

        return measure_busy.main([a for a in sys.argv[1:] if a != "--busy"])
    with tempfile.TemporaryDirectory() as folder:
        loom, nodes = build(Path(folder))
        print(
            f"document: {nodes[-1].end:,} tokens, {len(loom.text(nodes[-1])):,} chars; "
            f"tree: {len(loom.tree.nodes) - 1:,} nodes; terminal {SIZE[0]}x{SIZE[1]}"
        )
        results = asyncio.run(measure(loom, nodes))
    import os

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'key':<46} {'cpu p50':>8} {'work p50':>9} {'p95':>7} {'frame p50':>10} {'p95':>7}  (ms)"
    )
    for name, (c50, w50, w95, f50, f95) in results.items():
        print(f"{name:<46} {c50:8.2f} {w50:9.2f} {w95:7.2f} {f50:10.2f} {f95:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
