"""Session files: import and export time per node, large tree against a tenth of it.

Two shapes, each timed at ``n`` and ``n / 10`` nodes (or levels):

- *wide*: one prompt with ``n`` continuations under it (a node's child count is what
  a quadratic import grew with);
- *deep*: a path ``n`` nodes deep, every node on it also holding one short
  alternative (every level a branch point: what made an indented export quadratic).

Each row's baseline is the time per node at the small size and loomterm's figure the
time per node at the large one; their ratio is 1.0 for work linear in the tree, and
10 for quadratic work. Import is the whole ``loomterm import`` of a loomterm JSON
tree with tokens (read the JSON, build the session file beside its name, read it back:
no model loads); export renders every branch in each format. No model is needed: the
trees are made here, with made-up token ids and words.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loomterm.bench.report import Row, ratio
from loomterm.store import SessionData
from loomterm.tree import Node, Origin, Tree

FILES = "Files"
FILES_NOTE = (
    "import and export of a wide tree and a deep path, time per node at n against n/10 "
    "(1.0: linear; 10: quadratic)"
)
WORDS = ("the", " light", " over", " river", " stone", ",", " and", " she", " said", ".\n")
MODEL = {"name": "bench", "source": "bench", "fingerprint": {"vocab": len(WORDS)}}
FORMATS = ("md", "txt", "json", "html")


def _node(tree: Tree, parent: Node, rng: random.Random, size: int, pieces: dict) -> Node:
    ids = [rng.randrange(len(WORDS)) for _ in range(size)]
    node = tree.add(parent, ids, rng.choice((Origin.USER, Origin.MODEL)))
    node.logprobs = [-rng.random() for _ in ids]
    node.top = [None] * size
    pieces[node.id] = [WORDS[i] for i in ids]
    return node


def synthetic_session(shape: str, n: int, seed: int = 0) -> SessionData:
    """A session with no model behind it: ``wide`` (``n`` children of one prompt) or
    ``deep`` (a path ``n`` nodes deep, each with a one-token alternative beside it),
    the cursor at the deepest node. Deterministic for a seed."""
    rng = random.Random(seed)
    tree = Tree()
    pieces: dict[int, list[str]] = {tree.root.id: []}
    prompt = _node(tree, tree.root, rng, 20, pieces)
    cursor = prompt
    if shape == "wide":
        for _ in range(n):
            cursor = _node(tree, prompt, rng, 6, pieces)
    elif shape == "deep":
        for _ in range(n):
            _node(tree, cursor, rng, 1, pieces)
            cursor = _node(tree, cursor, rng, 6, pieces)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return SessionData(
        tree=tree, pieces=pieces, cursor=cursor.id, model=dict(MODEL), name=f"{shape}-{n}"
    )


def _clock(fn: Callable[[], object], reps: int = 2) -> float:
    """The best of ``reps`` runs (the least disturbed by the rest of the machine)."""
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _import_seconds(data: SessionData, folder: Path) -> float:
    """The whole import of ``data``'s JSON tree into a new session file."""
    from loomterm.export import read_import, render_json
    from loomterm.sessions.session import import_session

    source = folder / f"{data.name}.json"
    source.write_text(render_json(data), encoding="utf-8")
    target = folder / f"{data.name}.loom"

    def once() -> None:
        import_session(read_import(source), target)
        target.unlink()

    return _clock(once)


def _export_seconds(data: SessionData, fmt: str) -> float:
    from loomterm.export import render

    return _clock(lambda: render(data, fmt, "all"))


def files_rows(nodes: int, depth: int, log: Callable[[str], None]) -> list[Row]:
    """Rows for import and each export format, wide (``nodes``) and deep (``depth``)."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="loomterm-bench-files-") as folder:
        for shape, big in (("wide", nodes), ("deep", depth)):
            small = max(1, big // 10)
            sizes = {n: synthetic_session(shape, n) for n in (small, big)}
            log(f"files: {shape} trees of {small:,} and {big:,}")
            tasks: list[tuple[str, Callable[[SessionData], float]]] = [
                ("import", lambda data: _import_seconds(data, Path(folder)))
            ]
            tasks += [
                (f"export {fmt}", lambda data, f=fmt: _export_seconds(data, f)) for fmt in FORMATS
            ]
            for label, task in tasks:
                per = {n: task(data) / len(data.tree.nodes) for n, data in sizes.items()}
                rows.append(
                    Row(
                        FILES,
                        f"{label}, {shape} {big:,} vs {small:,}",
                        per[small] * 1e6,
                        per[big] * 1e6,
                        "us/node",
                        ratio(per[big], per[small]),
                        target="<=2",
                        note=f"{len(sizes[big].tree.nodes):,} nodes; per node at n over n/10",
                        extra={"small": small, "big": big, "shape": shape},
                    )
                )
    return rows
