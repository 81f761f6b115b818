"""A session in memory, as read back from its file: :class:`SessionData`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loomterm.tree import Node, Tree


@dataclass(frozen=True)
class Caret:
    """Where the editor's caret was: a character offset into the text of the path from
    the root to node ``node`` (the cursor when it was recorded); ``char`` None is the
    end of that path, however long it has grown since.

    A character offset rather than a token index: the path's text is what the file
    keeps for certain (the stored pieces), it reads the same after a re-tokenization
    (another model's tokens), and it is what the editor's caret already is. Tagging it
    with its node makes it meaningful only while the cursor is still there: a cursor
    moved by anything that did not also record the caret (a script, the CLI) leaves a
    caret of another node, which is ignored (the caret goes to the end, as before).
    Stored in the ``session`` table under ``caret`` as ``{"node": id, "char": n|null}``.
    """

    node: int
    char: int | None = None

    def as_json(self) -> dict[str, int | None]:
        return {"node": self.node, "char": self.char}

    @classmethod
    def from_json(cls, value: Any) -> Caret | None:
        """The caret a stored value describes; None for anything malformed (a caret is
        a convenience: a bad one is dropped, never an error)."""
        if not isinstance(value, dict):
            return None
        node, char = value.get("node"), value.get("char")
        if not _whole(node) or not (char is None or _whole(char)):
            return None
        return cls(node, None if char is None else max(0, char))


@dataclass(frozen=True)
class Typed:
    """Text the writer typed before the model could read it (the editor takes typing
    while its model loads): the whole text of the document, built on node ``node``'s
    path. Kept in the ``session`` table under ``typed`` as ``{"node": id, "text": s}``
    until the model has read it into the tree, so a kill or a failed load loses none of
    it; the editor puts it back on the screen when the session is next opened.
    """

    node: int
    text: str

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "text": self.text}

    @classmethod
    def from_json(cls, value: Any) -> Typed | None:
        """The typed text a stored value describes; None for anything malformed."""
        if not isinstance(value, dict):
            return None
        node, text = value.get("node"), value.get("text")
        if not _whole(node) or not isinstance(text, str):
            return None
        return cls(node, text)


def hoisted(value: Any) -> int | None:
    """The node id a stored ``hoist`` value names (``{"node": id}``: the editor works
    inside that node's branch), or None: not hoisted, or anything malformed (a hoist is
    a view of the session, like the caret: a bad one is dropped, never an error)."""
    if not isinstance(value, dict):
        return None
    node = value.get("node")
    return node if _whole(node) and node >= 0 else None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
            each model-written node's ``meta["model"]``; ``engine.loom.registry``).
        model_state: ``{"active": key, "attached": [keys]}``: which of them were
            attached when the session was last changed, and which was active (empty
            in files written before it was kept: then every recorded model is tried).
        created, modified: Times (seconds since the epoch) of creation and last change.
        name: The session's name (its file stem), or a title.
        caret: Where the editor's caret was (:class:`Caret`), if recorded (files
            written before it was kept have none: the caret goes to the end).
        typed: Text typed before the model read it (:class:`Typed`), if any.
        hoist: The id of the node the editor was hoisted at (:func:`hoisted`), if
            any (always a node of ``tree``).
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
    caret: Caret | None = None
    typed: Typed | None = None
    hoist: int | None = None

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
