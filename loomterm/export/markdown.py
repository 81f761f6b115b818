"""The Markdown transcript: who wrote what, as labelled quotes, or every branch."""

from __future__ import annotations

from loomterm.export.views import (
    bookmark_note,
    chain,
    chat_roles,
    is_chat,
    model_legend,
    model_name,
    runs,
    turns,
    when,
)
from loomterm.store import SessionData
from loomterm.tree import Node


def quote(text: str, indent: str = "") -> str:
    """``text`` as a Markdown block quote that shows it literally.

    Each line gets ``> `` (a bare ``>`` when empty); ``&`` and ``<`` become entities so
    tags in model output display as text instead of being taken for HTML. The exact
    text comes back by dropping the prefixes and undoing those two (:func:`unquote`).
    """
    escaped = text.replace("&", "&amp;").replace("<", "&lt;")
    return "\n".join(f"{indent}> {line}" if line else f"{indent}>" for line in escaped.split("\n"))


def unquote(lines: list[str]) -> str:
    """The text of a quote made by :func:`quote`, from its lines (indent removed)."""
    body = "\n".join(line[2:] if line.startswith("> ") else "" for line in lines)
    return body.replace("&lt;", "<").replace("&amp;", "&")


def _blocks(
    data: SessionData,
    nodes: list[Node],
    roles: dict[int, str | None] | None,
    indent: str = "",
    merge: bool = True,
) -> list[str]:
    """Labelled quotes: a chat's turns (``roles``), else runs of one author."""
    if roles is not None:
        found = turns(data, nodes, roles)
    else:
        found = runs(data, nodes, False, merge=merge)
    blocks = []
    for run in found:
        notes = [note for note in (bookmark_note(n) for n in run.nodes) if note]
        head = f"{indent}**{run.label}**" + "".join(f" · {note}" for note in notes)
        blocks.append(f"{head}\n\n{quote(run.text, indent)}")
    return blocks


def render_markdown(data: SessionData, branch: str = "current") -> str:
    """The cursor's path as labelled quotes (``current``), or an outline of every
    branch with the alternatives at each branch point (``all``).

    A chat session reads as its turns (System, User, Assistant) with the chat
    template's tokens left out (the JSON export keeps them); any other session as runs
    of one author (You, Model, Edited), exactly its text. In the outline every node is
    a block of its own, so a parent and its child stay apart."""
    roles = chat_roles(data) if is_chat(data) else None
    path = data.cursor_node.path()
    tokens = sum(len(node.tokens) for node in path)
    lines = [
        f"# {data.name or 'loomterm session'}",
        "",
        f"- Model: {model_name(data)}",
        f"- Last change: {when(data.modified)}",
        f"- Current path: {tokens} tokens in {len(path) - 1} segments"
        + (f"; the tree has {len(data.tree.nodes) - 1} nodes" if branch == "all" else ""),
    ]
    legend = model_legend(data)
    if legend:
        lines.append("- Models (who wrote a block is named after \u201cModel \u00b7\u201d):")
        lines.extend(f"  - `{key}`: {text}" for key, text in legend)
    lines.append("")
    if branch != "all":
        lines.append("\n\n".join(_blocks(data, path, roles)))
        return "\n".join(lines).rstrip("\n") + "\n"

    on_path = {node.id for node in path}
    lines.append("## Every branch")
    lines.append("")
    # Each item is a chain up to a branch point; its alternatives nest below it.
    stack: list[tuple[Node, int, str]] = [(data.tree.root, -1, "")]
    while stack:
        start, level, title = stack.pop()
        nodes = chain(start)
        indent = "  " * (level + 1) if level >= 0 else ""
        if level >= 0:
            marks = [f"*{title}*", f"node {start.id}"]
            if start.id in on_path:
                marks.append("current path")
            lines.append("  " * level + "- " + " · ".join(marks))
            lines.append("")
        body = _blocks(data, nodes, roles, indent, merge=False)
        if body:
            lines.append("\n\n".join(body))
            lines.append("")
        kids = nodes[-1].children
        for i in reversed(range(len(kids))):
            stack.append((kids[i], level + 1, f"alternative {i + 1} of {len(kids)}"))
    return "\n".join(lines).rstrip("\n") + "\n"
