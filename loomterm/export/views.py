"""Views of a session that every format shares: the cursor's path alone, who wrote
each node, runs of one author, chat turns without their template, chains up to a branch
point, and small labels."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from loomterm.export.parts import Part, parts
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
        contexts=data.contexts,
        model=data.model,
        vocab=data.vocab,
        created=data.created,
        modified=data.modified,
        name=data.name,
        models=data.models,
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


def author(node: Node, chat: bool, origin: Origin | None = None) -> str:
    """Who wrote ``node`` (or the part of it written by ``origin``, see
    :mod:`~loomterm.export.parts`): the chat role in a chat session, else the origin."""
    origin = Origin(node.origin) if origin is None else origin
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


def runs(data: SessionData, nodes: list[Node], chat: bool, merge: bool = True) -> list[Run]:
    """Group ``nodes`` (in path order) into runs of one author; empty nodes vanish. A
    merged node counts as its parts (:func:`~loomterm.export.parts.parts`), as before
    the merge. A bookmarked node is a run of its own (the mark is its alone); with
    ``merge`` False every node (every part) is."""
    out: list[Run] = []
    texts: list[list[str]] = []  # each run's text in pieces, joined once at the end
    for part in (part for node in nodes for part in parts(data, node)):
        node = part.node
        if not part.text:
            continue
        label = author(node, chat, part.origin)
        writer = node.meta.get("model")
        if writer and len(data.models) > 1 and part.origin is Origin.MODEL:
            label = f"{label} \u00b7 {writer}"  # several models: say which one wrote it
        marked = bool(node.meta.get("bookmark"))
        if (
            merge
            and out
            and out[-1].label == label
            and not marked
            and not out[-1].nodes[-1].meta.get("bookmark")
        ):
            if out[-1].nodes[-1] is not node:
                out[-1].nodes.append(node)
            texts[-1].append(part.text)
        else:
            out.append(Run(label, [node], ""))
            texts.append([part.text])
    for run, pieces in zip(out, texts, strict=True):
        run.text = "".join(pieces)
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


def model_legend(data: SessionData) -> list[tuple[str, str]]:
    """(key, description) of every model in the tree's table, when there are several
    (one model needs no legend: ``model_name`` says it)."""
    if len(data.models) < 2:
        return []
    out = []
    for key, record in data.models.items():
        record = record if isinstance(record, dict) else {}
        facts = [str(record.get(k)) for k in ("kind", "source", "precision") if record.get(k)]
        name = str(record.get("name") or key)
        out.append((key, f"{name} ({', '.join(facts)})" if facts else name))
    return out


def bookmark_note(node: Node) -> str:
    mark = node.meta.get("bookmark")
    if not mark:
        return ""
    return f"bookmark: {mark}" if isinstance(mark, str) else "bookmarked"


# -- chat turns -----------------------------------------------------------------------

# What chat templates put around a turn's content: a header naming the role, and the
# special tokens that open and close turns (ChatML, Llama 3, Gemma, Phi, Mistral,
# DeepSeek and their kin). The session keeps them as tokens; a transcript drops them.
# Special tokens have no text (``engine.text``), so a turn's text starts with the bare
# role word its header spells ("user\n", Llama 3's "user\n\n"): the first alternative.
_HEADERS = re.compile(
    r"\A[ \t]*(?:system|user|assistant|model|tool|developer)[ \t]*\n+|"
    r"<\|im_start\|>[ \t]*[\w-]*[ \t]*\n?"
    r"|<\|start_header_id\|>[^<]*<\|end_header_id\|>\n*"
    r"|<start_of_turn>[\w-]*\n?"
    r"|<\|(?:system|user|assistant|tool)\|>\n?"
    r"|<\uff5c(?:User|Assistant)\uff5c>"
)
_MARKERS = re.compile(
    r"<\|[A-Za-z0-9_.:-]{1,40}\|>"
    r"|<\uff5c[^\uff5c<>]{1,40}\uff5c>"
    r"|</?(?:s|start_of_turn|end_of_turn|eos|bos)>"
    r"|\[/?INST\]|<</?SYS>>"
)


def strip_template(text: str) -> str:
    """A chat turn's text without its template: role headers and special tokens."""
    return _MARKERS.sub("", _HEADERS.sub("", text))


def chat_roles(data: SessionData) -> dict[int, str | None]:
    """Each node's turn in a chat: its own ``role``, or, for a node without one, the
    assistant's when it goes on from an assistant turn (the model's answer after the
    assistant header, the template's closing tokens); else None."""
    roles: dict[int, str | None] = {}
    stack = [data.tree.root]
    while stack:
        node = stack.pop()
        own = node.meta.get("role")
        if own:
            roles[node.id] = str(own)
        elif node.parent is not None and roles.get(node.parent.id) == "assistant":
            roles[node.id] = "assistant"
        else:
            roles[node.id] = None
        stack.extend(node.children)
    return roles


def turn_label(role: str, members: list[Part], data: SessionData) -> str:
    """``Assistant``, ``User``...; with who wrote it when that is not the usual one (the
    parts holding only template text do not count)."""
    origins = {
        part.origin
        for part in members
        if strip_template(part.text).strip().strip("\ufffd")  # not a byte's stand-in
    }
    label = role.capitalize()
    if Origin.EDIT in origins or (role == "assistant" and len(origins) > 1):
        return f"{label} (edited)"
    if role == "assistant" and origins and Origin.MODEL not in origins:
        return f"{label} (written by you)"
    if role != "assistant" and Origin.MODEL in origins:
        return f"{label} (written by the model)"
    return label


def turns(data: SessionData, nodes: list[Node], roles: dict[int, str | None]) -> list[Run]:
    """``nodes`` (in path order) as chat turns, template text removed: one run per turn
    (nodes without a turn are runs of their author, a merged node's parts each by its
    own); turns left empty vanish."""
    groups: list[tuple[str | None, list[Part]]] = []
    for node in nodes:
        if node.parent is None:
            continue
        role = roles.get(node.id)
        for part in parts(data, node):
            key = role if role else ORIGIN_LABELS[part.origin]
            if groups and groups[-1][0] == key:
                groups[-1][1].append(part)
            else:
                groups.append((key, [part]))
    out: list[Run] = []
    for key, members in groups:
        text = "".join(part.text for part in members)
        role = roles.get(members[0].node.id)
        if role:
            text = strip_template(text).strip("\n")
            label = turn_label(role, members, data)
        else:
            label = key or ""
        nodes_in = list({id(part.node): part.node for part in members}.values())
        if text.strip():
            out.append(Run(label, nodes_in, text))
    return out
