"""A stand-in for the engine's Loom: the same tree, events and text methods, no model.

Token ids below 256 are raw bytes (so a character can span tokens, as in byte-level
BPE). It lets the store and the session glue be tested without torch.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import Any

from loomterm.tree import Node, Origin, Tree


class ByteCodec:
    """Token id = one byte."""

    def token_bytes(self, token: int) -> bytes:
        return bytes([token % 256])

    def decode(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def pieces(self, tokens: list[int]) -> list[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return [decoder.decode(self.token_bytes(t)) for t in tokens]


@dataclass
class FakeLoaded:
    name: str = "fake-bytes"
    source: str = "fake-bytes"
    device: str = "cpu"
    dtype: str = "float32"
    fingerprint: dict[str, Any] = field(
        default_factory=lambda: {
            "name": "fake-bytes",
            "config": "c0",
            "weights": "w0",
            "tokenizer": "t0",
        }
    )
    tokenizer: Any = None
    model: Any = None


class FakeLoom:
    """Tree, cursor, settings and events like the real Loom; text is UTF-8 bytes."""

    def __init__(self, tree: Tree | None = None) -> None:
        self.tree = tree or Tree()
        self.loaded = FakeLoaded()
        self.tokenizer = None
        self.text_codec = ByteCodec()
        self.settings: dict[str, Any] = {"temperature": 1.0, "n": 4}
        self.device = "cpu"
        self.dtype = "float32"
        self._listeners: list = []
        self._cursor = self.tree.root

    # events
    def subscribe(self, listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event: str, node: Node | None) -> None:
        for listener in list(self._listeners):
            listener(event, node)

    @property
    def root(self) -> Node:
        return self.tree.root

    @property
    def cursor(self) -> Node:
        return self._cursor

    @cursor.setter
    def cursor(self, node: Node) -> None:
        self._cursor = node
        self.emit("cursor", node)

    def update_settings(self, **changes: Any) -> None:
        self.settings.update(changes)
        self.emit("settings", None)

    # text
    def encode(self, text: str, at_start: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: list[int]) -> str:
        return self.text_codec.decode(tokens)

    def token_pieces(self, tokens: list[int]) -> list[str]:
        return self.text_codec.pieces(tokens)

    def text(self, node: Node) -> str:
        return self.decode(node.path_tokens())

    # edits
    def append(self, node: Node, text: str, origin: Origin = Origin.USER, **meta: Any) -> Node:
        child = self.tree.add(node, self.encode(text), origin, meta=dict(meta))
        self.emit("add", child)
        return child

    def start_generation(self, node: Node, seed: int | None = 7) -> Node:
        child = self.tree.add(node, [], Origin.MODEL, sampling={"temperature": 0.7}, seed=seed)
        self.emit("add", child)
        return child

    def grow(self, node: Node, text: str) -> None:
        """Append generated tokens one by one, with logprobs and alternatives."""
        for i, token in enumerate(text.encode("utf-8")):
            node.tokens.append(token)
            node.logprobs.append(-0.25 * (i % 5))
            node.top.append([(token, -0.25 * (i % 5)), (65 + i % 26, -2.5), (32, -3.0)])
            self.emit("tokens", node)

    def split(self, node: Node, offset: int) -> Node:
        head = self.tree.split(node, offset)
        self.emit("split", head)
        return head


def sample_tree() -> FakeLoom:
    """A small tree with branches, a split, every origin, meta and a cursor."""
    loom = FakeLoom()
    prompt = loom.append(loom.root, "Once upon a time", role="user")
    first = loom.start_generation(prompt)
    loom.grow(first, ", there was a caf\u00e9 \U0001f600.\nThe end.")
    loom.emit("done", first)
    second = loom.start_generation(prompt, seed=None)
    loom.grow(second, " in a land far away")
    loom.emit("done", second)
    edited = loom.tree.add(second, list(b' <edit> & "quotes"'), Origin.EDIT)
    edited.meta["bookmark"] = "favourite"
    loom.emit("add", edited)
    loom.split(first, 5)
    hidden = loom.append(prompt, "\n\n# not a heading\n> not a quote", hidden=True)
    hidden.approx = True
    loom.emit("update", hidden)
    loom.cursor = edited
    return loom


def tree_record(tree: Tree) -> list[tuple]:
    """Everything the file must keep about each node, for equality checks."""
    return [
        (
            node.id,
            node.parent.id if node.parent is not None else None,
            [child.id for child in node.children],
            list(node.tokens),
            list(node.logprobs),
            [None if top is None else [tuple(alt) for alt in top] for top in node.top],
            Origin(node.origin).value,
            bool(node.approx),
            node.sampling,
            node.seed,
            node.created,
            node.meta,
        )
        for node in sorted(tree.nodes.values(), key=lambda n: n.id)
    ]
