"""The Markdown export: the document as prose, or every branch as flat sections.

What is not the document's text (the session's name, model names, bookmark notes,
labels) is escaped by :func:`inline`: it shows literally in any Markdown renderer, with
no raw HTML, no link, no image and no bare URL made live. The document itself comes
out as prose, Markdown and all (a writer's ``*emphasis*`` stays emphasis), with only
what could run or fetch something neutralised by :func:`prose`: raw HTML shows as text
and images do not load. Who wrote which part (You, Model, Edited; which model when
there are several) is an option, off by default; a chat always reads as its turns.
The outline of every branch is a flat list of sections, one per chain of nodes up to a
branch point, so its size grows with the tree and not with the tree's depth.
"""

from __future__ import annotations

import re

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

# The ASCII punctuation that means something to CommonMark or GitHub's extensions
# (emphasis, links, images, code, headings, lists, tables, autolinked URLs and mail
# addresses), less ``&`` and ``<`` (written as entities), ``;`` (which ends them) and
# parentheses (a link needs the brackets before them, and those are escaped).
_PUNCTUATION = re.compile(r"""([!#*+\-./:=>@\[\\\]_`{|}~])""")


def inline(text: object) -> str:
    """``text`` (a name, a note, a label) as Markdown that shows it literally, on one
    line: ``&`` and ``<`` as entities (no raw HTML), every other punctuation mark
    backslash-escaped (no emphasis, link, image, heading or list; a bare URL is cut
    into pieces no autolinker joins), line breaks and other control characters as
    spaces."""
    flat = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in str(text))
    escaped = flat.replace("&", "&amp;").replace("<", "&lt;")
    return _PUNCTUATION.sub(r"\\\1", escaped)


def prose(text: str) -> str:
    """The document's own text as Markdown prose: as written, except that ``&`` and
    ``<`` become entities (tags in the text show as text; nothing runs) and the ``[``
    of an image (``![``) an entity too (no picture is fetched from anywhere when the
    file is viewed). :func:`unprose` gives the exact text back."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;")
    return escaped.replace("![", "!&#91;")


def unprose(markdown: str) -> str:
    """The exact text :func:`prose` was given (every ``&`` in its output is one it
    wrote, so the entities undo without ambiguity)."""
    return markdown.replace("!&#91;", "![").replace("&lt;", "<").replace("&amp;", "&")


def _note(nodes: list[Node]) -> str:
    return "".join(f" \u00b7 {inline(note)}" for note in map(bookmark_note, nodes) if note)


def _body(
    data: SessionData,
    nodes: list[Node],
    roles: dict[int, str | None] | None,
    attribution: bool,
    merge: bool = True,
) -> list[str]:
    """``nodes``' text: a chat's labelled turns (``roles``), labelled runs of one
    author (``attribution``), else one piece of prose."""
    if roles is not None:
        found = turns(data, nodes, roles)
    elif attribution:
        found = runs(data, nodes, False, merge=merge)
    else:
        text = "".join(data.text(node) for node in nodes)
        return [prose(text)] if text else []
    return [f"**{inline(run.label)}**{_note(run.nodes)}\n\n{prose(run.text)}" for run in found]


def render_markdown(data: SessionData, branch: str = "current", attribution: bool = False) -> str:
    """The cursor's path as prose (``current``), or every branch as a section per chain
    of nodes up to a branch point (``all``).

    ``attribution``: label who wrote each part (You, Model, Edited, and which model
    when several wrote), each a block of its own; off, the text reads as one piece of
    prose. A chat session always reads as its turns (System, User, Assistant), the
    chat template's tokens left out (the JSON export keeps them)."""
    roles = chat_roles(data) if is_chat(data) else None
    path = data.cursor_node.path()
    tokens = sum(len(node.tokens) for node in path)
    lines = [
        f"# {inline(data.name or 'loomterm session')}",
        "",
        f"- Model: {inline(model_name(data))}",
        f"- Last change: {inline(when(data.modified))}",
        f"- Current path: {tokens} tokens in {len(path) - 1} segments"
        + (f"; the tree has {len(data.tree.nodes) - 1} nodes" if branch == "all" else ""),
    ]
    legend = model_legend(data)
    if legend and (attribution or roles is not None):
        lines.append("- Models (who wrote a block is named after \u201cModel \u00b7\u201d):")
        lines.extend(f"  - {inline(key)}: {inline(text)}" for key, text in legend)
    lines.append("")
    if branch != "all":
        lines.extend("\n\n".join(_body(data, path, roles, attribution)).split("\n"))
        if roles is None and not attribution:
            lines.extend(_bookmark_lines(data, path))
        return "\n".join(lines).rstrip("\n") + "\n"

    on_path = {node.id for node in path}
    lines.append("## Every branch")
    # One section per chain, in the tree's order (depth first, oldest branch first).
    stack: list[tuple[Node, str]] = [(data.tree.root, "")]
    while stack:
        start, title = stack.pop()
        nodes = chain(start)
        marks = [title] if title else []
        if start.parent is not None:
            marks.append(f"node {start.id}, after node {start.parent.id}")
        if start.id in on_path:
            marks.append("current path")
        notes = "" if roles is not None or attribution else _note(nodes)
        lines.append("")
        lines.append(f"### {inline(' · '.join(marks) or 'start')}{notes}")
        body = _body(data, nodes, roles, attribution, merge=False)
        if body:
            lines.append("")
            lines.append("\n\n".join(body))
        kids = nodes[-1].children
        for i in reversed(range(len(kids))):
            stack.append((kids[i], f"alternative {i + 1} of {len(kids)}"))
    return "\n".join(lines).rstrip("\n") + "\n"


def _bookmark_lines(data: SessionData, nodes: list[Node]) -> list[str]:
    """The path's bookmarks, listed after the prose: each note, its node, and the
    start of the node's text."""
    marked = [(node, note) for node in nodes if (note := bookmark_note(node))]
    if not marked:
        return []
    out = ["", "## Bookmarks", ""]
    for node, note in marked:
        flat = " ".join(data.text(node).split())
        excerpt = flat if len(flat) <= 60 else flat[:59] + "\u2026"
        out.append(f"- {inline(note)}, node {node.id}: {inline(excerpt)}")
    return out
