"""The plain-text export: the cursor's path text exactly (ending in a newline, as a
text file does), or every branch indented.

Indentation stops growing at :data:`MAX_INDENT` levels (each heading names its level
from there on): a path thousands of branch points deep would otherwise be indented by
thousands of spaces per line, the file growing with the square of its depth."""

from __future__ import annotations

from loomterm.export.views import chain
from loomterm.store import SessionData
from loomterm.tree import Node

MAX_INDENT = 8  # levels of indentation, at four spaces each


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
        pad = "    " * min(level, MAX_INDENT)
        if title:
            deep = f", level {level}" if level > MAX_INDENT else ""
            head = "    " * min(level - 1, MAX_INDENT)
            out.append(f"{head}--- {title} (node {start.id}{deep}) ---")
        text = "".join(data.text(node) for node in nodes)
        if text:
            out.extend(pad + line for line in text.split("\n"))
        kids = nodes[-1].children
        for i in reversed(range(len(kids))):
            stack.append((kids[i], level + 1, f"alternative {i + 1} of {len(kids)}"))
    return "\n".join(out) + "\n"
