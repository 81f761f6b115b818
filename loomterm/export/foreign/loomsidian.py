"""The Obsidian Loom plugin (loomsidian): its ``data.json`` (``settings`` and a
``state`` per note) and one note's export (a ``NoteState``).

Nodes are keyed by id with a ``parentId``; children keep the file's order, as the
plugin shows them. A data file's notes become branches from the root, each named by its
note's path. The plugin's ``settings`` hold API keys and endpoints in plain text: they
are never read. ``bookmarked`` nodes become bookmarks, ``unread`` ones stay unread,
``current`` becomes the cursor.
"""

from __future__ import annotations

from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, text_of
from loomterm.export.text_tree import TextTree


def looks_like_loomsidian(obj: Any) -> bool:
    """A note's state (``nodes`` of ``text``/``parentId``) or a data file of them (told
    apart from another plugin with the same id by that shape, not by the path)."""
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("state"), dict) and obj["state"]:
        return all(_is_note(note) for note in obj["state"].values())
    return _is_note(obj)


def _is_note(note: Any) -> bool:
    if not isinstance(note, dict) or not isinstance(note.get("nodes"), dict):
        return False
    return all(isinstance(n, dict) and "parentId" in n for n in note["nodes"].values())


def from_loomsidian(obj: dict[str, Any], name: str = "") -> TextTree:
    """Read a loomsidian data file or note export."""
    build = TreeBuilder(name)
    if isinstance(obj.get("state"), dict):
        cursor = None
        for path, note in obj["state"].items():
            found = _note(build, note, {"imported_name": str(path)})
            cursor = found if found is not None else cursor
        if isinstance(obj.get("settings"), dict):
            build.notice("dropped the Loom plugin's settings (they hold its API keys and endpoints)")  # fmt: skip
        if len(obj["state"]) > 1:
            build.notice(f"{len(obj['state'])} notes became {len(obj['state'])} branches from the start")  # fmt: skip
        return build.finish(cursor)
    return build.finish(_note(build, obj, {}))


def _note(build: TreeBuilder, note: dict[str, Any], meta: dict[str, Any]) -> int | None:
    """One note's tree below the root; returns the node of its ``current`` id."""
    nodes: dict[str, dict[str, Any]] = note["nodes"]
    kids: dict[Any, list[str]] = {}
    for key, node in nodes.items():
        parent = node.get("parentId")
        kids.setdefault(parent if isinstance(parent, str) and parent in nodes else None, []).append(key)  # fmt: skip
    made: dict[str, int] = {}
    stack = [(key, 0) for key in reversed(kids.get(None, []))]
    while stack:
        key, parent = stack.pop()
        if key in made:
            continue
        node = nodes[key]
        extra = dict(meta) if parent == 0 else {}
        if node.get("bookmarked"):
            extra["bookmark"] = True
        if node.get("unread"):
            extra["unread"] = True
        made[key] = build.add(parent, text_of(node.get("text")), meta=extra)
        stack.extend((kid, made[key]) for kid in reversed(kids.get(key, [])))
    lost = len(nodes) - len(made)
    if lost:
        build.notice(f"skipped {lost} nodes that no root reaches (their parents form a loop)")
    return made.get(note.get("current")) if isinstance(note.get("current"), str) else None
