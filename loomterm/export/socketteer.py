"""Importing socketteer/loom's JSON trees (nested ``text``/``children`` nodes)."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from loomterm.export.errors import import_error
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

# socketteer/loom keeps who wrote a node in meta.source: "prompt" (typed), "AI"
# (generated), "mixed" (generated, then edited by hand).
SOCKETTEER_SOURCES = {"prompt": Origin.USER, "AI": Origin.MODEL, "mixed": Origin.EDIT}


def looks_like_socketteer(obj: Any) -> bool:
    """socketteer/loom's tree: ``{"root": {"text", "children"}}``, a bare root node, or
    a list of top-level nodes (its ``load_tree_data`` accepts all three)."""
    if isinstance(obj, dict) and isinstance(obj.get("root"), dict):
        return "children" in obj["root"] or "text" in obj["root"]
    if isinstance(obj, dict):
        return "text" in obj and "children" in obj
    return isinstance(obj, list) and all(isinstance(item, dict) and "text" in item for item in obj)


def from_socketteer(obj: Any, source: str = "<json>") -> TextTree:
    """Read a socketteer/loom tree: nested ``text``/``children`` nodes with string ids,
    ``meta.source``/``meta.creation_timestamp``, ``tags`` (a ``bookmark`` tag becomes a
    bookmark) and the top-level ``selected_node_id`` (becomes the cursor)."""
    if isinstance(obj, list):
        top: dict[str, Any] = {"root": {"text": "", "children": obj}}
    elif "root" in obj:
        top = obj
    else:
        top = {"root": obj}
    tree = TextTree(0, {}, {}, {}, {}, {}, {}, cursor=0, name="")
    ids: dict[str, int] = {}
    root = top["root"]
    if not isinstance(root, dict):
        raise import_error(source, "its root is not a node")
    # Our root holds no text: a socketteer root with text becomes its first child.
    stack: list[tuple[dict, int | None]] = []
    tree.parents[0], tree.children[0], tree.texts[0] = None, [], ""
    tree.origins[0], tree.created[0], tree.meta[0] = Origin.ROOT, time.time(), {}
    if root.get("text"):
        stack.append((root, 0))
    else:
        ids[str(root.get("id", ""))] = 0
        stack.extend((child, 0) for child in reversed(_kids(root)))
    while stack:
        item, parent = stack.pop()
        node_id = len(tree.parents)
        if "id" in item:
            ids[str(item["id"])] = node_id
        meta_in = item.get("meta") if isinstance(item.get("meta"), dict) else {}
        tree.parents[node_id] = parent
        tree.children[node_id] = []
        tree.children[parent].append(node_id)
        tree.texts[node_id] = _text_of(item, source)
        tree.origins[node_id] = SOCKETTEER_SOURCES.get(str(meta_in.get("source")), Origin.IMPORT)
        tree.created[node_id] = _socketteer_time(meta_in.get("creation_timestamp"))
        meta: dict[str, Any] = {}
        tags = [str(tag) for tag in _list_of(item.get("tags"))]
        if "bookmark" in tags or item.get("bookmark"):
            meta["bookmark"] = True
        if "archived" in tags:
            meta["hidden"] = True
        if tags:
            meta["tags"] = tags
        tree.meta[node_id] = meta
        stack.extend((child, node_id) for child in reversed(_kids(item)))
    selected = top.get("selected_node_id")
    tree.cursor = ids.get(str(selected), 0) if selected is not None else 0
    if tree.cursor == 0 and len(tree.parents) > 1:
        # No usable selection: follow the newest branch, as loomterm would.
        node = 0
        while tree.children[node]:
            node = tree.children[node][-1]
        tree.cursor = node
    return tree


def _text_of(item: dict, source: str) -> str:
    """A node's text: text, or nothing; any other value is refused (made into text it
    would put a Python repr into the story)."""
    text = item.get("text")
    if text is None:
        return ""
    if not isinstance(text, str):
        where = f"node {item['id'][:40]!r}" if isinstance(item.get("id"), str) else "a node"
        raise import_error(source, f"{where}'s text is {type(text).__name__}, not text")
    return text


def _list_of(value: Any) -> list:
    """A list field (children, tags); anything else is taken as none."""
    return value if isinstance(value, list) else []


def _kids(item: dict) -> list[dict]:
    return [kid for kid in _list_of(item.get("children")) if isinstance(kid, dict)]


def _socketteer_time(stamp: Any) -> float:
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and math.isfinite(stamp):
        return float(stamp)
    if isinstance(stamp, str):
        try:
            return datetime.strptime(stamp, "%Y-%m-%d-%H.%M.%S").timestamp()
        except (ValueError, OverflowError, OSError):  # no such date, or not on this system
            pass
    return time.time()
