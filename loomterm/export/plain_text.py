"""The plain-text export: the cursor's path text exactly (ending in a newline, as a
text file does), or every branch indented."""

from __future__ import annotations

from loomterm.export.views import chain
from loomterm.store import SessionData
from loomterm.tree import Node


def render_text(data: SessionData, branch: str = "current") -> str:
    """The cursor's path text exactly, plus a final newline if it has none
    (``current``), or every branch indented (``all``)."""
    if branch != "all":
        text = data.path_text()
        return text if text.endswith("\n") or not text else text + "\n"  # a text file
    out: list[str] = []
    stack: list[tuple[Node, int, str]] = [(data.tree.root, 0, "")]
    while stack:
        start, level, title = stack.pop()
        nodes = chain(start)
        pad = "    " * level
        if title:
            out.append(f"{'    ' * (level - 1)}--- {title} (node {start.id}) ---")
        text = "".join(data.text(node) for node in nodes)
        if text:
            out.extend(pad + line for line in text.split("\n"))
        kids = nodes[-1].children
        for i in reversed(range(len(kids))):
            stack.append((kids[i], level + 1, f"alternative {i + 1} of {len(kids)}"))
    return "\n".join(out) + "\n"
