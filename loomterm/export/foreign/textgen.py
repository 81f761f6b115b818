"""text-generation-webui chat histories: ``internal``/``visible`` (and the older
``data``/``data_visible``) rows of ``[user, assistant]``, and the newer ``metadata``
with each message's ``versions``.

The model's text (``internal``) is imported, not the HTML shown in the browser. Each
turn is a node ``You: ...`` or ``Assistant: ...`` (the file names no character); a
message's other versions become its siblings. The first row's
``<|BEGIN-VISIBLE-CHAT|>`` marks a greeting with no user turn.
"""

from __future__ import annotations

from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, table_of, tables_in, text_of
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

GREETING_MARK = "<|BEGIN-VISIBLE-CHAT|>"


def looks_like_textgen(obj: Any) -> bool:
    """A history: a list of two-text rows under ``internal`` or ``data``."""
    if not isinstance(obj, dict):
        return False
    rows = obj.get("internal", obj.get("data"))
    if not isinstance(rows, list) or not ({"visible", "data_visible"} & set(obj)):
        return False
    return all(isinstance(row, list) and len(row) == 2 for row in rows)


def from_textgen(obj: dict[str, Any], name: str = "") -> TextTree:
    """Read a text-generation-webui history."""
    build = TreeBuilder(name)
    rows = obj.get("internal", obj.get("data"))
    metadata = table_of(obj.get("metadata"))
    node = 0
    for index, (user, assistant) in enumerate(rows):
        for role, text, label, origin in (
            ("user", user, "You", Origin.USER),
            ("assistant", assistant, "Assistant", Origin.MODEL),
        ):
            text = text_of(text)
            if role == "user" and text == GREETING_MARK:
                continue
            if role == "user" and not text and index == 0:
                continue
            lead = f"\n{label}: " if node else f"{label}: "
            parent = node
            node = build.add(parent, lead + text, origin)
            for version in tables_in(table_of(metadata.get(f"{role}_{index}")).get("versions")):
                other = text_of(version.get("content"))
                if other and other != text:
                    build.add(parent, lead + other, origin)
    return build.finish(node)
