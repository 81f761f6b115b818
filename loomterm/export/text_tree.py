"""Trees known only by their text (another loom's file, or a session for another
model): :class:`TextTree`, and :func:`retokenize_tree` to give them a model's tokens."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loomterm.store import SessionData
from loomterm.tree import Node, Origin, Tree


@dataclass
class TextTree:
    """A tree known only by its text (another loom's file): tokens come later, from a
    model, through :func:`retokenize_tree`."""

    root: int
    parents: dict[int, int | None]
    children: dict[int, list[int]]
    texts: dict[int, str]
    origins: dict[int, Origin]
    created: dict[int, float]
    meta: dict[int, dict[str, Any]]
    cursor: int
    settings: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    sampling: dict[int, Any] = field(default_factory=dict)
    seeds: dict[int, Any] = field(default_factory=dict)

    @property
    def created_at(self) -> float:
        return min(self.created.values(), default=time.time())


def text_tree_of(data: SessionData) -> TextTree:
    """A session's tree reduced to its text (to re-tokenize it for another model)."""
    nodes = list(data.tree.root.walk())
    return TextTree(
        root=data.tree.root.id,
        parents={n.id: n.parent.id if n.parent is not None else None for n in nodes},
        children={n.id: [c.id for c in n.children] for n in nodes},
        texts={n.id: data.text(n) for n in nodes},
        origins={n.id: Origin(n.origin) for n in nodes},
        created={n.id: n.created for n in nodes},
        meta={n.id: dict(n.meta) for n in nodes},
        cursor=data.cursor,
        settings=dict(data.settings),
        model=dict(data.model),
        name=data.name,
        sampling={n.id: n.sampling for n in nodes},
        seeds={n.id: n.seed for n in nodes},
    )


def retokenize_tree(text: TextTree, encode: Callable[[str, bool], list[int]]) -> Tree:
    """Build a token tree from a text tree: each node's text is encoded on its own
    (``encode(text, at_start)``; ``at_start`` for the first text on a path, so the
    tokenizer may add its start token). Ids, order, origins, times and meta are kept;
    logprobs and alternatives are unknown."""
    nodes: dict[int, Node] = {}
    order = [(text.root, False)]
    while order:
        node_id, started = order.pop()
        parent_id = text.parents.get(node_id)
        tokens = encode(text.texts.get(node_id, ""), not started) if parent_id is not None else []
        node = Node(
            id=node_id,
            parent=nodes[parent_id] if parent_id is not None else None,
            tokens=tokens,
            logprobs=[None] * len(tokens),
            top=[None] * len(tokens),
            origin=text.origins.get(node_id, Origin.IMPORT),
            sampling=text.sampling.get(node_id),
            seed=text.seeds.get(node_id),
            created=text.created.get(node_id, time.time()),
            meta=dict(text.meta.get(node_id, {})),
        )
        if node.parent is not None:
            node.parent.children.append(node)
        nodes[node_id] = node
        for child in reversed(text.children.get(node_id, [])):
            order.append((child, started or bool(tokens)))
    return Tree.from_nodes(nodes[text.root], nodes)
