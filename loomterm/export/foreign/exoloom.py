"""exoloom's exports (``loomType: Exoloom``, ``schemaVersion`` 1): nodes keyed by id
with ordered ``childrenIds``; ``authorType`` USER or LLM, ``authorName`` the model.

The lens' bookmarks become bookmarks and its pruned nodes hidden branches. exoloom's
export says nothing of the active path, so the cursor follows the newest branch.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, table_of, tables_in, text_of
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

AUTHORS = {"USER": Origin.USER, "LLM": Origin.MODEL}


def looks_like_exoloom(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("loomType") == "Exoloom" and isinstance(obj.get("tree"), dict)  # fmt: skip


def from_exoloom(obj: dict[str, Any], name: str = "") -> TextTree:
    """Read an exoloom export."""
    tree = obj["tree"]
    build = TreeBuilder(name or text_of(tree.get("title")))
    nodes, lens = table_of(tree.get("nodes")), table_of(obj.get("lens"))
    marked = {str(b.get("nodeId")) for b in tables_in(lens.get("bookmarks"))}
    pruned = {str(p.get("nodeId")) for p in tables_in(lens.get("prunedNodes"))}
    made: dict[str, int] = {}
    stack = [(str(tree.get("rootNodeId")), 0)]
    while stack:
        key, parent = stack.pop()
        node = nodes.get(key)
        if key in made or not isinstance(node, dict):
            continue
        meta: dict[str, Any] = {}
        if key in marked:
            meta["bookmark"] = True
        if key in pruned:
            meta["hidden"] = True
        if node.get("authorType") == "LLM" and isinstance(node.get("authorName"), str):
            meta["imported_model"] = node["authorName"]
        origin = AUTHORS.get(node.get("authorType"), Origin.IMPORT)
        made[key] = build.add(parent, text_of(node.get("content")), origin, _when(node.get("createdAt")), meta)  # fmt: skip
        kids = node.get("childrenIds") if isinstance(node.get("childrenIds"), list) else []
        stack.extend((str(kid), made[key]) for kid in reversed(kids))
    lost = len(nodes) - len(made)
    if lost:
        build.notice(f"skipped {lost} nodes that the root does not reach")
    return build.finish()


def _when(stamp: Any) -> float | None:
    if isinstance(stamp, str):
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):
            return None
    return None
