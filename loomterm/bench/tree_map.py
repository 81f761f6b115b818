"""The tree map's cost per key: the same keys on a complete tree and on one a sixteenth
its size (no model).

A complete tree of 4 children a node, 7 levels below the root (21,845 nodes), against 5
levels (1,365). Each key is what the editor's map does for it (``loomterm.tree_map``),
the drawing of a 40-row screen included (its cells, not the terminal's styles):

- *open*: a new layout of the tree, the document's path found, the screen placed;
- *move*: a sibling, a child or the parent, and the screen drawn again;
- *jump*: a page down (39 rows) or to the last branch, and the screen drawn.

Each row is the median time of the key on the big tree against the small one: 1.0 means
the key does not grow with the tree (the target is ``<=2``; the path to a leaf is 7
units deep instead of 5, so a little more than 1 is expected).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import median, percentile
from loomterm.tree import Node, Origin, Tree
from loomterm.tree_map import MapLayout

TREE_MAP = "Tree map"
TREE_MAP_NOTE = (
    "per key on a complete tree (4 children a node) against one a sixteenth its size, "
    "a 40-row screen drawn; baseline: the small tree"
)
HEIGHT = 40
BRANCHING = 4


def complete_tree(depth: int, branching: int = BRANCHING) -> tuple[Tree, list[Node]]:
    """A complete tree ``depth`` levels below the root, and its leaves in order."""
    tree = Tree()
    level = [tree.root]
    for _ in range(depth):
        level = [tree.add(node, [1], Origin.MODEL) for node in level for _ in range(branching)]
    return tree, level


class _Map:
    """The map's state as the editor keeps it: layout, cursor, path, rows on screen."""

    def __init__(self, tree: Tree, current: Node) -> None:
        self.tree = tree
        self.current = current
        self.open()

    def open(self) -> None:
        self.layout = layout = MapLayout(self.tree.root)
        self.path = layout.path_units(self.current)
        self.cursor = layout.unit_at(self.current)
        self.rows = layout.screen(self.cursor, [], HEIGHT, centre=True)
        self.draw()

    def draw(self) -> None:
        for row in self.rows:
            self.layout.row(row, self.path, limit=200)

    def move(self, to: Node) -> None:
        self.cursor = to
        self.rows = self.layout.screen(to, self.rows, HEIGHT)
        self.draw()


def _keys(state: _Map) -> dict[str, list[Callable[[], None]]]:
    """The keys, each on the layout the map holds when it is pressed."""

    def sibling() -> None:
        state.move(state.layout.sibling(state.cursor, 1))

    def parent() -> None:
        state.move(state.layout.up(state.cursor))

    def child() -> None:
        state.move(state.layout.down(state.cursor, state.path))

    def page() -> None:
        layout = state.layout
        state.move(layout.step_rows(layout.row_of(state.cursor), HEIGHT - 1))

    def end() -> None:
        state.move(state.layout.last_row(state.layout.top))

    return {"open": [state.open], "move": [sibling, parent, child], "jump": [page, end]}


def key_seconds(depth: int, reps: int) -> dict[str, list[float]]:
    """Per key kind, the seconds each press took on the complete tree ``depth`` deep."""
    tree, leaves = complete_tree(depth)
    state = _Map(tree, leaves[len(leaves) // 3])
    out: dict[str, list[float]] = {}
    keys = _keys(state)
    for _ in range(reps):
        for kind, presses in keys.items():
            for key in presses:
                start = time.perf_counter()
                key()
                out.setdefault(kind, []).append(time.perf_counter() - start)
    return out


def tree_map_rows(depth: int, reps: int, log: Callable[[str], None]) -> list[Row]:
    """A row per key kind: its median time at ``depth`` against ``depth - 2``."""
    small_depth = max(2, depth - 2)
    nodes = {d: (BRANCHING ** (d + 1) - 1) // (BRANCHING - 1) for d in (small_depth, depth)}
    log(f"tree map: complete trees of {nodes[depth]:,} and {nodes[small_depth]:,} nodes")
    big = key_seconds(depth, reps)
    small = key_seconds(small_depth, reps)
    rows = []
    for kind in ("open", "move", "jump"):
        big_ms, small_ms = median(big[kind]) * 1e3, median(small[kind]) * 1e3
        rows.append(
            Row(
                TREE_MAP,
                f"{kind}, {nodes[depth]:,} vs {nodes[small_depth]:,} nodes",
                small_ms,
                big_ms,
                "ms",
                ratio(big_ms, small_ms),
                target="<=2",
                note=f"p95 {percentile(big[kind], 0.95) * 1e3:.2f} ms at {nodes[depth]:,}",
                extra={"nodes": nodes[depth], "small": nodes[small_depth]},
            )
        )
    return rows
