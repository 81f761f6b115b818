"""Search across every branch: how long a search of a tree the size of socketteer/loom's
demo tree (764 nodes) takes.

The tree is built here from the bench corpus, shaped like a writer's loom: 764 nodes of
10 to 200 tokens, each new node hanging mostly from one of the latest three (so branches
grow deep: the deepest path holds about 6,000 tokens)
and now and then from anywhere.
The baseline is what searching "every branch" naively costs: decode each root-to-leaf
path's whole text and search it. loomterm's search (``loomterm.search``) decodes each
node once in its path's context and matches across node boundaries; it is timed cold
(nothing decoded yet) and warm (a new query on the same tree, as when the user types
the next character of a query).
"""

from __future__ import annotations

import random
import time

from loomterm.bench.report import Row, speedup
from loomterm.bench.timing import median
from loomterm.search import NodeTexts, Query, search_tree
from loomterm.tree import Origin, Tree

SEARCH = "Search"
SEARCH_NOTE = (
    "every branch of a 764-node tree (socketteer/loom's demo size); "
    "baseline: decode and search each root-to-leaf path"
)
DEMO_NODES = 764
QUERIES = (Query("the light"), Query(r"\b\w+ly\b", regex=True))


def demo_tree(corpus: list[int], nodes: int = DEMO_NODES, seed: int = 0) -> Tree:
    """A tree of ``nodes`` nodes (the root not counted) cut from ``corpus``, shaped as
    the module docstring says. Deterministic for a seed."""
    rng = random.Random(seed)
    tree = Tree()
    made = [tree.root]
    cursor = 0
    for _ in range(nodes):
        if rng.random() < 0.15:
            parent = rng.choice(made)
        else:
            parent = rng.choice(made[-3:])
        size = rng.randint(10, 200)
        if cursor + size > len(corpus):
            cursor = 0
        tokens = corpus[cursor : cursor + size]
        cursor += size
        made.append(tree.add(parent, tokens, rng.choice((Origin.USER, Origin.MODEL))))
    return tree


def _naive(tree: Tree, query: Query, decode) -> int:
    """The baseline: every leaf's whole path decoded and searched."""
    pattern = query.compile()
    count = 0
    for node in tree.nodes.values():
        if not node.children:
            count += sum(1 for _ in pattern.finditer(decode(node.path_tokens())))
    return count


def _clock(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def search_rows(loaded, corpus: list[int], reps: int, log) -> list[Row]:
    """Rows for each query: the naive baseline against a cold and a warm search."""
    from loomterm.engine.text import TokenText

    codec = TokenText(loaded.tokenizer)
    tree = demo_tree(corpus)
    tokens = sum(len(n.tokens) for n in tree.nodes.values())
    deepest = max(n.end for n in tree.nodes.values())
    log(f"search: a {len(tree.nodes) - 1}-node tree, {tokens:,} tokens, deepest path {deepest:,}")
    rows: list[Row] = []
    for query in QUERIES:
        naive = median([_clock(_naive, tree, query, codec.decode) for _ in range(reps)])
        cold, warm = [], []
        hits = 0
        for _ in range(reps):
            texts = NodeTexts(codec.token_bytes)
            cold.append(_clock(search_tree, tree.root, query, texts))
            warm.append(_clock(search_tree, tree.root, query, texts))
            hits = len(search_tree(tree.root, query, texts).hits)
        kind = "regex" if query.regex else "plain"
        for label, seconds in (("first search", median(cold)), ("next search", median(warm))):
            rows.append(
                Row(
                    SEARCH,
                    f"{kind} {query.text!r}: {label}",
                    naive * 1000,
                    seconds * 1000,
                    "ms",
                    speedup(naive, seconds),
                    target=">=5" if label == "first search" else "",
                    note=f"{hits} hits, {len(tree.nodes) - 1} nodes, {tokens:,} tokens",
                    extra={"hits": hits, "nodes": len(tree.nodes) - 1, "tokens": tokens},
                )
            )
    return rows
