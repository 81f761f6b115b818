"""A session in memory, as read back from its file: :class:`SessionData`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loomterm.tree import Node, Tree


@dataclass
class SessionData:
    """Everything a session file holds, in memory, with no model attached.

    Exports and the ``sessions`` listing work from this alone, so they never need to
    load model weights.

    Attributes:
        tree: The whole tree (``Node.kv`` is empty).
        pieces: Per node id, the display text of each token (``"".join`` is the
            node's text).
        cursor: Id of the node the user is at.
        settings: Per-session settings.
        contexts: The context versions nodes were generated with (``meta["context"]``),
            id to ``{"memory", "authors_note", "authors_note_depth", "world_info"}``.
        model: ``{"name", "source", "fingerprint"}`` of the model the tokens belong to.
        vocab: Display text of token ids that appear only as alternatives.
        models: Key to record of every model that wrote into the tree (the key is in
            each model-written node's ``meta["model"]``; ``engine.registry``).
        model_state: ``{"active": key, "attached": [keys]}``: which of them were
            attached when the session was last changed, and which was active (empty
            in files written before it was kept: then every recorded model is tried).
        created, modified: Times (seconds since the epoch) of creation and last change.
        name: The session's name (its file stem), or a title.
    """

    tree: Tree
    pieces: dict[int, list[str]]
    cursor: int
    settings: dict[str, Any] = field(default_factory=dict)
    contexts: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    vocab: dict[int, str] = field(default_factory=dict)
    created: float = 0.0
    modified: float = 0.0
    name: str = ""
    models: dict[str, Any] = field(default_factory=dict)
    model_state: dict[str, Any] = field(default_factory=dict)

    @property
    def cursor_node(self) -> Node:
        """The cursor as a node (the root if the id is unknown)."""
        return self.tree.nodes.get(self.cursor, self.tree.root)

    def text(self, node: Node) -> str:
        """One node's own text."""
        return "".join(self.pieces.get(node.id, ()))

    def path_text(self, node: Node | None = None) -> str:
        """The text of the path from the root to ``node`` (default: the cursor)."""
        node = node if node is not None else self.cursor_node
        return "".join(self.text(item) for item in node.path())
