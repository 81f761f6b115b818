"""The rows a session file holds for nodes and tokens, and the statements that write them.

:class:`~loomterm.store.writer.SessionStore` runs these inside its own transactions;
each function here takes the connection it writes through.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

from loomterm.store.encoding import pack_top, to_json
from loomterm.tree import Node, Origin

INSERT_NODE = (
    "INSERT INTO nodes(parent, position, origin, approx, sampling, seed, created, meta, id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_TOKENS = (
    "INSERT INTO tokens(node, idx, token, piece, logprob, top) VALUES (?, ?, ?, ?, ?, ?)"
)


def set_key(conn: sqlite3.Connection, key: str, value: Any) -> None:
    """Keep ``value`` (as JSON) under ``key`` in the ``session`` table."""
    conn.execute("INSERT OR REPLACE INTO session(key, value) VALUES (?, ?)", (key, to_json(value)))


def node_row(node: Node, position: int | None = None) -> tuple:
    """A node's column values; ``position`` among its siblings when the caller
    knows it (looking it up costs a scan of the siblings)."""
    parent = node.parent
    if position is None:
        position = parent.children.index(node) if parent is not None else 0
    return (
        parent.id if parent is not None else None,
        position,
        Origin(node.origin).value,
        int(bool(node.approx)),
        to_json(node.sampling) if node.sampling is not None else None,
        node.seed,
        float(node.created),
        to_json(node.meta or {}),
        node.id,
    )


def insert_node(conn: sqlite3.Connection, node: Node) -> None:
    """A new row for ``node``."""
    conn.execute(INSERT_NODE, node_row(node))


def update_node(conn: sqlite3.Connection, node: Node) -> None:
    """Rewrite ``node``'s row (its parent, place, flags, sampling and meta)."""
    conn.execute(
        "UPDATE nodes SET parent = ?, position = ?, origin = ?, approx = ?, sampling = ?,"
        " seed = ?, created = ?, meta = ? WHERE id = ?",
        node_row(node),
    )


def renumber_children(conn: sqlite3.Connection, parent: Node | None) -> None:
    """Write the places of ``parent``'s children among their siblings."""
    if parent is None:
        return
    conn.executemany(
        "UPDATE nodes SET parent = ?, position = ? WHERE id = ?",
        [(parent.id, i, child.id) for i, child in enumerate(parent.children)],
    )


def insert_tokens(
    conn: sqlite3.Connection,
    node: Node,
    start: int,
    pieces: list[str],
    end: int | None = None,
) -> None:
    """New rows for tokens ``start:end`` of ``node``."""
    conn.executemany(INSERT_TOKENS, token_rows(node, start, pieces, end))


def delete_tokens(conn: sqlite3.Connection, node_id: int) -> None:
    """Remove every token row of the node ``node_id``."""
    conn.execute("DELETE FROM tokens WHERE node = ?", (node_id,))


def walk_with_positions(root: Node) -> Iterator[tuple[Node, int]]:
    """Every node under ``root`` (parents first) with its place among its siblings."""
    stack = [(root, 0)]
    while stack:
        node, position = stack.pop()
        yield node, position
        children = node.children
        stack.extend((children[i], i) for i in range(len(children) - 1, -1, -1))


def token_rows(node: Node, start: int, pieces: list[str], end: int | None = None) -> list[tuple]:
    """The ``tokens`` rows of tokens ``start:end`` of ``node``."""
    end = len(node.tokens) if end is None else end
    if len(pieces) != end - start:
        raise ValueError(f"{len(pieces)} pieces for {end - start} tokens")
    return [
        (
            node.id,
            i,
            int(node.tokens[i]),
            pieces[i - start],
            logprob_value(node, i),
            pack_top(node.top[i]),
        )
        for i in range(start, end)
    ]


def logprob_value(node: Node, i: int) -> float | None:
    """The log-probability of ``node``'s token ``i`` as the file keeps it."""
    return None if node.logprobs[i] is None else float(node.logprobs[i])
