"""Views of a session that every format shares: the cursor's path alone, who wrote
each node, runs of one author, chains up to a branch point, and small labels."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loomterm.store import SessionData
from loomterm.tree import Node, Origin, Tree


def path_only(data: SessionData) -> SessionData:
    """A copy of ``data`` holding only the cursor's path (for ``--branch current``)."""
    keep = data.cursor_node.path()
    nodes: dict[int, Node] = {}
    for node in keep:
        copy = Node(
            id=node.id,
            parent=nodes.get(node.parent.id) if node.parent is not None else None,
            tokens=list(node.tokens),
            logprobs=list(node.logprobs),
            top=list(node.top),
            origin=node.origin,
            approx=node.approx,
            sampling=node.sampling,
            seed=node.seed,
            created=node.created,
            meta=dict(node.meta),
        )
        if copy.parent is not None:
            copy.parent.children.append(copy)
        nodes[node.id] = copy
    return SessionData(
        tree=Tree.from_nodes(nodes[keep[0].id], nodes),
        pieces={node.id: list(data.pieces.get(node.id, [])) for node in keep},
        cursor=data.cursor,
        settings=data.settings,
        model=data.model,
        vocab=data.vocab,
        created=data.created,
        modified=data.modified,
        name=data.name,
    )


def is_chat(data: SessionData) -> bool:
    """True when the session's nodes carry chat roles (from the chat template's turns)."""
    return any(node.meta.get("role") for node in data.tree.nodes.values())


ORIGIN_LABELS = {
    Origin.USER: "You",
    Origin.MODEL: "Model",
    Origin.EDIT: "Edited",
    Origin.IMPORT: "Imported",
    Origin.ROOT: "Start",
}


def author(node: Node, chat: bool) -> str:
    """Who wrote ``node``: the chat role in a chat session, else the origin."""
    origin = Origin(node.origin)
    role = node.meta.get("role")
    if chat and role:
        label = str(role).capitalize()
        if origin is Origin.EDIT:
            return f"{label} (edited)"
        if role == "assistant" and origin is Origin.USER:
            return f"{label} (written by you)"
        if role != "assistant" and origin is Origin.MODEL:
            return f"{label} (written by the model)"
        return label
    return ORIGIN_LABELS[origin]


@dataclass
class Run:
    """Consecutive nodes of one author, as one block of text."""

    label: str
    nodes: list[Node]
    text: str


def runs(data: SessionData, nodes: list[Node], chat: bool) -> list[Run]:
    """Group ``nodes`` (in path order) into runs of one author; empty nodes vanish."""
    out: list[Run] = []
    for node in nodes:
        text = data.text(node)
        if not text:
            continue
        label = author(node, chat)
        if out and out[-1].label == label:
            out[-1].nodes.append(node)
            out[-1].text += text
        else:
            out.append(Run(label, [node], text))
    return out


def chain(node: Node) -> list[Node]:
    """``node`` and the single-child nodes below it, up to a branch point or a leaf."""
    nodes = [node]
    while len(nodes[-1].children) == 1:
        nodes.append(nodes[-1].children[0])
    return nodes


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M") if seconds else "?"


def model_name(data: SessionData) -> str:
    return str(data.model.get("name") or data.model.get("source") or "unknown model")


def bookmark_note(node: Node) -> str:
    mark = node.meta.get("bookmark")
    if not mark:
        return ""
    return f"bookmark: {mark}" if isinstance(mark, str) else "bookmarked"
