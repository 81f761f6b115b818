"""Building a :class:`TextTree` one node at a time, as every foreign reader does."""

from __future__ import annotations

import time
from typing import Any

from loomterm.config.injection import check_world_info
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin


class TreeBuilder:
    """A :class:`TextTree` under construction: node 0 is the root, which holds no text.

    Linear in the nodes added: every call is constant time."""

    def __init__(self, name: str = "") -> None:
        self.tree = TextTree(0, {0: None}, {0: []}, {0: ""}, {0: Origin.ROOT}, {0: time.time()}, {0: {}}, cursor=0, name=name)  # fmt: skip
        # (parent, text) -> its first child holding that text: add_path's lookup in
        # constant time, however many children a node has
        self.child_with: dict[tuple[int, str], int] = {}

    def add(
        self,
        parent: int,
        text: str,
        origin: Origin = Origin.IMPORT,
        created: float | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """A new last child of ``parent`` holding ``text``; returns its id."""
        tree = self.tree
        node = len(tree.parents)
        tree.parents[node] = parent
        tree.children[node] = []
        tree.children[parent].append(node)
        tree.texts[node] = text
        tree.origins[node] = origin
        tree.created[node] = created if created is not None else time.time()
        tree.meta[node] = dict(meta or {})
        self.child_with.setdefault((parent, text), node)
        return node

    def add_path(self, parent: int, texts: list[str], origin: Origin = Origin.IMPORT) -> int:
        """Nodes for ``texts`` one under the other, below ``parent``, sharing the
        children already there whose text is the same (paths that share a beginning
        share its nodes); returns the last node (``parent`` for no texts)."""
        for text in texts:
            same = self.child_with.get((parent, text))
            parent = same if same is not None else self.add(parent, text, origin)
        return parent

    def notice(self, line: str) -> None:
        """Tell the user something about the import (a secret dropped, a part skipped)."""
        if line not in self.tree.notices:
            self.tree.notices.append(line)

    def context(
        self,
        memory: Any = "",
        authors_note: Any = "",
        world_info: list[tuple[Any, Any]] | None = None,
    ) -> None:
        """Memory, author's note and world info (``(keys, text)`` pairs; keys a list or
        one comma-separated string) as the session's settings; entries loomterm cannot
        hold (no key, no text) are skipped and counted in a notice."""
        settings = self.tree.settings
        if isinstance(memory, str) and memory.strip():
            settings["memory"] = memory
        if isinstance(authors_note, str) and authors_note.strip():
            settings["authors_note"] = authors_note
        entries, skipped = [], 0
        for keys, text in world_info or []:
            if isinstance(keys, str):
                keys = keys.split(",")
            if not isinstance(keys, list):
                keys = []
            keys = [k.strip() for k in keys if isinstance(k, str) and k.strip()]
            if keys and isinstance(text, str) and text.strip():
                entries.append({"keys": keys, "text": text})
            else:
                skipped += 1
        if entries:
            settings["world_info"] = check_world_info({"entries": entries})
        if skipped:
            self.notice(f"skipped {skipped} world info entr{'y' if skipped == 1 else 'ies'} without keys or text")  # fmt: skip

    def follow_newest(self, start: int = 0) -> int:
        """The leaf reached from ``start`` by always taking the last child."""
        node = start
        while self.tree.children[node]:
            node = self.tree.children[node][-1]
        return node

    def finish(self, cursor: int | None = None) -> TextTree:
        """The tree, its cursor at ``cursor`` (default: the newest leaf)."""
        self.tree.cursor = cursor if cursor is not None else self.follow_newest()
        return self.tree


def text_of(value: Any) -> str:
    """A text field of a foreign file: a string as it is, anything else empty."""
    return value if isinstance(value, str) else ""


def table_of(value: Any) -> dict[Any, Any]:
    """An object field of a foreign file: a dict as it is, anything else empty."""
    return value if isinstance(value, dict) else {}


def tables_in(value: Any) -> list[dict[Any, Any]]:
    """The objects in a list field of a foreign file (anything else is skipped)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def whole_number(value: Any, low: int = 0, high: int = 100_000) -> int | None:
    """An integer field within ``[low, high]``, else None (booleans are not numbers)."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None
