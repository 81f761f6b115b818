"""Transcripts that leave the app, and trees that come in. Headless: no model needed.

Everything here works on :class:`~loomterm.store.SessionData` (a tree plus each token's
display text), so exporting a session reads its file and never loads model weights.

Formats out (:func:`render`): ``md`` (who wrote what), ``txt`` (the bare text), ``json``
(the full tree, lossless, schema below) and ``html`` (one self-contained page). Formats
in (:func:`read_import`): loomterm JSON, and socketteer/loom's JSON trees.

loomterm JSON tree, version 1
=============================

One object::

    {
      "format": "loomterm-tree",        # always this string
      "version": 1,                     # bumped on any incompatible change
      "name": "story",                  # the session's name
      "created": 1730000000.0,          # seconds since the epoch
      "modified": 1730000100.0,
      "model": {                        # whose token ids these are
        "name": "SmolLM2-135M-Instruct",
        "source": "HuggingFaceTB/SmolLM2-135M-Instruct",   # what to load it by
        "fingerprint": {"name": "...", "config": "<sha256>", "weights": "<sha256>",
                        "tokenizer": "<sha256>"},
        "dtype": "float32"
      },
      "settings": {...},                # per-session settings (sampling defaults...)
      "cursor": 7,                      # id of the node the user is at
      "root": 0,                        # id of the root node (it holds no tokens)
      "nodes": [ NODE, ... ],           # parents before children
      "vocab": {"1234": " the", ...}    # display text of ids seen only as alternatives
    }

    NODE = {
      "id": 3,                          # int, unique, stable
      "parent": 0,                      # id, or null for the root
      "children": [4, 9],               # ids, in sibling order (oldest first)
      "origin": "model",                # root | user | model | edit | import
      "text": " jumps over",            # the node's text: "".join(pieces)
      "tokens": [123, 456],             # token ids
      "pieces": [" jumps", " over"],    # display text per token
      "logprobs": [-0.41, null],        # per token; null where never measured
      "top": [[[123, -0.41], [88, -1.9]], null],  # per token: [id, logprob] pairs
      "approx": false,                  # KV was re-rotated (fast splice, context shift)
      "sampling": {"temperature": 0.8, ...} | null,
      "seed": 42 | null,
      "created": 1730000050.0,
      "meta": {"role": "assistant", "bookmark": true, "hidden": false, ...}
    }

Non-finite floats (a logprob of minus infinity) are written as the strings ``"-inf"``,
``"inf"`` or ``"nan"`` so the file stays strict JSON. A file whose nodes have ``text``
but no ``tokens`` is a text-only tree: importing it tokenizes the text with a model.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from loomterm import __version__
from loomterm.errors import LoomError
from loomterm.store import SessionData
from loomterm.tree import Node, Origin, Tree

JSON_FORMAT = "loomterm-tree"
JSON_VERSION = 1
FORMATS = ("md", "txt", "json", "html")
SUFFIXES = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".json": "json",
    ".html": "html",
    ".htm": "html",
}


class ExportError(LoomError):
    """An export or import that cannot be done (bad input file, unwritable output)."""


# -- a view of one path or the whole tree ---------------------------------------------


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


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M") if seconds else "?"


def _model_name(data: SessionData) -> str:
    return str(data.model.get("name") or data.model.get("source") or "unknown model")


def _bookmark(node: Node) -> str:
    mark = node.meta.get("bookmark")
    if not mark:
        return ""
    return f"bookmark: {mark}" if isinstance(mark, str) else "bookmarked"


# -- Markdown -------------------------------------------------------------------------


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


def _md_runs(data: SessionData, nodes: list[Node], chat: bool, indent: str = "") -> list[str]:
    blocks = []
    for run in runs(data, nodes, chat):
        notes = [note for note in (_bookmark(n) for n in run.nodes) if note]
        head = f"{indent}**{run.label}**" + "".join(f" · {note}" for note in notes)
        blocks.append(f"{head}\n\n{quote(run.text, indent)}")
    return blocks


def render_markdown(data: SessionData, branch: str = "current") -> str:
    """The cursor's path as labelled quotes (``current``), or an outline of every
    branch with the alternatives at each branch point (``all``)."""
    chat = is_chat(data)
    path = data.cursor_node.path()
    tokens = sum(len(node.tokens) for node in path)
    lines = [
        f"# {data.name or 'loomterm session'}",
        "",
        f"- Model: {_model_name(data)}",
        f"- Last change: {_when(data.modified)}",
        f"- Current path: {tokens} tokens in {len(path) - 1} segments"
        + (f"; the tree has {len(data.tree.nodes) - 1} nodes" if branch == "all" else ""),
        "",
    ]
    if branch != "all":
        lines.append("\n\n".join(_md_runs(data, path, chat)))
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
        body = _md_runs(data, nodes, chat, indent)
        if body:
            lines.append("\n\n".join(body))
            lines.append("")
        kids = nodes[-1].children
        for i in reversed(range(len(kids))):
            stack.append((kids[i], level + 1, f"alternative {i + 1} of {len(kids)}"))
    return "\n".join(lines).rstrip("\n") + "\n"


# -- plain text -----------------------------------------------------------------------


def render_text(data: SessionData, branch: str = "current") -> str:
    """The cursor's path text exactly (``current``), or every branch indented (``all``)."""
    if branch != "all":
        return data.path_text()
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


# -- JSON -----------------------------------------------------------------------------


def _float_out(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _float_in(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)  # "inf", "-inf", "nan"
    return float(value)


def to_json_dict(data: SessionData) -> dict[str, Any]:
    """The loomterm JSON tree (schema in the module docstring)."""
    nodes = []
    for node in data.tree.root.walk():
        nodes.append(
            {
                "id": node.id,
                "parent": node.parent.id if node.parent is not None else None,
                "children": [child.id for child in node.children],
                "origin": Origin(node.origin).value,
                "text": data.text(node),
                "tokens": list(node.tokens),
                "pieces": list(data.pieces.get(node.id, [])),
                "logprobs": [_float_out(lp) for lp in node.logprobs],
                "top": [
                    None if top is None else [[int(t), _float_out(lp)] for t, lp in top]
                    for top in node.top
                ],
                "approx": bool(node.approx),
                "sampling": node.sampling,
                "seed": node.seed,
                "created": node.created,
                "meta": node.meta,
            }
        )
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "name": data.name,
        "created": data.created,
        "modified": data.modified,
        "model": data.model,
        "settings": data.settings,
        "cursor": data.cursor,
        "root": data.tree.root.id,
        "nodes": nodes,
        "vocab": {str(token): piece for token, piece in sorted(data.vocab.items())},
    }


def render_json(data: SessionData) -> str:
    return json.dumps(to_json_dict(data), ensure_ascii=False, indent=1, allow_nan=False) + "\n"


@dataclass
class TextTree:
    """A tree known only by its text (another loom's file): tokens come later, from a
    model, through :func:`retokenize_tree`."""

    root: int
    parents: dict[int, int | None]
    children: dict[int, list[int]]
    texts: dict[int, str]
    origins: dict[int, Origin]
    created: dict[int, float]
    meta: dict[int, dict[str, Any]]
    cursor: int
    settings: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    sampling: dict[int, Any] = field(default_factory=dict)
    seeds: dict[int, Any] = field(default_factory=dict)

    @property
    def created_at(self) -> float:
        return min(self.created.values(), default=time.time())


def _bad(path: str | os.PathLike, why: str) -> ExportError:
    return ExportError(f"cannot import {os.fspath(path)}: {why}")


def from_json_dict(obj: dict[str, Any], source: str = "<json>") -> SessionData | TextTree:
    """Read a loomterm JSON tree; a tree without tokens comes back as a TextTree."""
    if obj.get("format") != JSON_FORMAT:
        raise _bad(source, "not a loomterm JSON tree")
    version = obj.get("version")
    if not isinstance(version, int) or version > JSON_VERSION:
        raise _bad(source, f"JSON tree version {version} is newer than this loomterm reads")
    try:
        raw = {int(item["id"]): item for item in obj["nodes"]}
        root_id = int(obj.get("root", 0))
        cursor = int(obj.get("cursor", root_id))
        _check_links(raw, root_id)
        text_only = any("tokens" not in item for item in raw.values())
        if text_only:
            return _text_tree_from_json(obj, raw, root_id, cursor)
        nodes: dict[int, Node] = {}
        pieces: dict[int, list[str]] = {}
        for node_id, item in raw.items():
            tokens = [int(t) for t in item["tokens"]]
            n = len(tokens)
            node_pieces = [str(p) for p in item.get("pieces") or []]
            if len(node_pieces) != n:
                raise ValueError(f"node {node_id} has {len(node_pieces)} pieces for {n} tokens")
            logprobs = [_float_in(lp) for lp in item.get("logprobs") or [None] * n]
            top = [
                None if alts is None else [(int(t), _float_in(lp)) for t, lp in alts]
                for alts in item.get("top") or [None] * n
            ]
            if len(logprobs) != n or len(top) != n:
                raise ValueError(f"node {node_id}: logprobs or top do not match its tokens")
            nodes[node_id] = Node(
                id=node_id,
                tokens=tokens,
                logprobs=logprobs,
                top=top,
                origin=Origin(item.get("origin", "import")),
                approx=bool(item.get("approx", False)),
                sampling=item.get("sampling"),
                seed=item.get("seed"),
                created=float(item.get("created", time.time())),
                meta=dict(item.get("meta") or {}),
            )
            pieces[node_id] = node_pieces
        _link(raw, nodes)
        tree = Tree.from_nodes(nodes[root_id], nodes)
        vocab = {int(token): str(piece) for token, piece in (obj.get("vocab") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(source, f"malformed JSON tree ({exc})") from None
    return SessionData(
        tree=tree,
        pieces=pieces,
        cursor=cursor if cursor in nodes else root_id,
        settings=dict(obj.get("settings") or {}),
        model=dict(obj.get("model") or {}),
        vocab=vocab,
        created=float(obj.get("created") or 0.0),
        modified=float(obj.get("modified") or 0.0),
        name=str(obj.get("name") or ""),
    )


def _check_links(raw: dict[int, dict], root_id: int) -> None:
    """Parents and children agree, and every node hangs from the root."""
    if root_id not in raw:
        raise ValueError(f"root {root_id} is not among the nodes")
    for node_id, item in raw.items():
        parent = item.get("parent")
        if (parent is None) != (node_id == root_id):
            raise ValueError(f"node {node_id} has parent {parent}")
        for child_id in item.get("children") or []:
            child = raw.get(int(child_id))
            if child is None or child.get("parent") != node_id:
                raise ValueError(f"node {child_id} is listed under {node_id} but hangs elsewhere")
    reached, stack = 0, [root_id]
    while stack:
        reached += 1
        stack.extend(int(c) for c in raw[stack.pop()].get("children") or [])
        if reached > len(raw):
            raise ValueError("the nodes form a cycle")
    if reached != len(raw):
        raise ValueError(f"{len(raw) - reached} nodes are not reachable from the root")


def _link(raw: dict[int, dict], nodes: dict[int, Node]) -> None:
    """Hang nodes from their parents in the order each parent's ``children`` lists."""
    for node_id, item in raw.items():
        for child_id in item.get("children") or []:
            child = nodes[int(child_id)]
            child.parent = nodes[node_id]
            nodes[node_id].children.append(child)


def _text_tree_from_json(obj: dict, raw: dict[int, dict], root_id: int, cursor: int) -> TextTree:
    return TextTree(
        root=root_id,
        parents={i: item.get("parent") for i, item in raw.items()},
        children={i: [int(c) for c in item.get("children") or []] for i, item in raw.items()},
        texts={i: str(item.get("text") or "") for i, item in raw.items()},
        origins={i: Origin(item.get("origin", "import")) for i, item in raw.items()},
        created={i: float(item.get("created", time.time())) for i, item in raw.items()},
        meta={i: dict(item.get("meta") or {}) for i, item in raw.items()},
        cursor=cursor if cursor in raw else root_id,
        settings=dict(obj.get("settings") or {}),
        model=dict(obj.get("model") or {}),
        name=str(obj.get("name") or ""),
        sampling={i: item.get("sampling") for i, item in raw.items()},
        seeds={i: item.get("seed") for i, item in raw.items()},
    )


# -- socketteer/loom ------------------------------------------------------------------

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
        raise _bad(source, "its root is not a node")
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
        tree.texts[node_id] = str(item.get("text") or "")
        tree.origins[node_id] = SOCKETTEER_SOURCES.get(meta_in.get("source"), Origin.IMPORT)
        tree.created[node_id] = _socketteer_time(meta_in.get("creation_timestamp"))
        meta: dict[str, Any] = {}
        tags = [str(tag) for tag in item.get("tags") or []]
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


def _kids(item: dict) -> list[dict]:
    kids = item.get("children") or []
    return [kid for kid in kids if isinstance(kid, dict)]


def _socketteer_time(stamp: Any) -> float:
    if isinstance(stamp, (int, float)):
        return float(stamp)
    if isinstance(stamp, str):
        try:
            return datetime.strptime(stamp, "%Y-%m-%d-%H.%M.%S").timestamp()
        except ValueError:
            pass
    return time.time()


def read_import(path: str | os.PathLike) -> SessionData | TextTree:
    """Read a file to import: loomterm JSON (with tokens: SessionData; without: a
    TextTree) or a socketteer/loom tree (a TextTree)."""
    try:
        with open(path, encoding="utf-8") as handle:
            obj = json.load(handle)
    except FileNotFoundError:
        raise _bad(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(path, str(getattr(exc, "strerror", None) or exc)) from None
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(obj, dict) and obj.get("format") == JSON_FORMAT:
        return from_json_dict(obj, os.fspath(path))
    if looks_like_socketteer(obj):
        return from_socketteer(obj, os.fspath(path))
    raise _bad(path, "neither a loomterm JSON tree nor a socketteer/loom tree")


def text_tree_of(data: SessionData) -> TextTree:
    """A session's tree reduced to its text (to re-tokenize it for another model)."""
    nodes = list(data.tree.root.walk())
    return TextTree(
        root=data.tree.root.id,
        parents={n.id: n.parent.id if n.parent is not None else None for n in nodes},
        children={n.id: [c.id for c in n.children] for n in nodes},
        texts={n.id: data.text(n) for n in nodes},
        origins={n.id: Origin(n.origin) for n in nodes},
        created={n.id: n.created for n in nodes},
        meta={n.id: dict(n.meta) for n in nodes},
        cursor=data.cursor,
        settings=dict(data.settings),
        model=dict(data.model),
        name=data.name,
        sampling={n.id: n.sampling for n in nodes},
        seeds={n.id: n.seed for n in nodes},
    )


def retokenize_tree(text: TextTree, encode: Callable[[str, bool], list[int]]) -> Tree:
    """Build a token tree from a text tree: each node's text is encoded on its own
    (``encode(text, at_start)``; ``at_start`` for the first text on a path, so the
    tokenizer may add its start token). Ids, order, origins, times and meta are kept;
    logprobs and alternatives are unknown."""
    nodes: dict[int, Node] = {}
    order = [(text.root, False)]
    while order:
        node_id, started = order.pop()
        parent_id = text.parents.get(node_id)
        tokens = encode(text.texts.get(node_id, ""), not started) if parent_id is not None else []
        node = Node(
            id=node_id,
            parent=nodes[parent_id] if parent_id is not None else None,
            tokens=tokens,
            logprobs=[None] * len(tokens),
            top=[None] * len(tokens),
            origin=text.origins.get(node_id, Origin.IMPORT),
            sampling=text.sampling.get(node_id),
            seed=text.seeds.get(node_id),
            created=text.created.get(node_id, time.time()),
            meta=dict(text.meta.get(node_id, {})),
        )
        if node.parent is not None:
            node.parent.children.append(node)
        nodes[node_id] = node
        for child in reversed(text.children.get(node_id, [])):
            order.append((child, started or bool(tokens)))
    return Tree.from_nodes(nodes[text.root], nodes)


# -- HTML -----------------------------------------------------------------------------

CSS = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; background: #fdfdfb; }
h1 { margin-bottom: .2rem; } .info { color: #666; margin-top: 0; }
.doc { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 14px;
       background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: .8rem; }
.o-user { color: #1d4ed8; } .o-model { color: #222; } .o-edit { color: #a21caf; }
.o-import { color: #555; } .approx { text-decoration: underline dotted #d97706; }
.t:hover { background: #fde68a; } .low { background: #fee2e2; }
details { margin: .3rem 0 .3rem 1.2rem; } summary { cursor: pointer; color: #444; }
summary .cur { color: #15803d; font-weight: 600; }
.legend span { margin-right: 1rem; }
""".strip()

_ORIGIN_CLASS = {
    Origin.USER: "o-user",
    Origin.MODEL: "o-model",
    Origin.EDIT: "o-edit",
    Origin.IMPORT: "o-import",
    Origin.ROOT: "o-import",
}


def _token_title(data: SessionData, node: Node, i: int) -> str:
    logprob = node.logprobs[i] if i < len(node.logprobs) else None
    if logprob is None:
        lines = ["probability not recorded"]
    else:
        lines = [f"p = {math.exp(logprob):.3f} (logprob {logprob:.3f})"]
    top = node.top[i] if i < len(node.top) else None
    if top:
        pieces = data.pieces.get(node.id, [])
        chosen = node.tokens[i]
        for token, lp in top[:10]:
            shown = pieces[i] if token == chosen and i < len(pieces) else data.vocab.get(token)
            label = repr(shown) if shown is not None else f"#{token}"
            lines.append(f"{math.exp(lp):.3f}  {label}")
    return "\n".join(lines)


def _html_tokens(data: SessionData, nodes: list[Node]) -> str:
    out = []
    for node in nodes:
        pieces = data.pieces.get(node.id, [])
        if not pieces:
            continue
        classes = ["seg", _ORIGIN_CLASS[Origin(node.origin)]] + (["approx"] if node.approx else [])
        out.append(f'<span class="{" ".join(classes)}" data-node="{node.id}">')
        for i, piece in enumerate(pieces):
            if not piece:
                continue  # first bytes of a character: its text shows on the next token
            logprob = node.logprobs[i] if i < len(node.logprobs) else None
            if logprob is None and not (i < len(node.top) and node.top[i]):
                out.append(html.escape(piece))  # typed text: nothing to show on hover
                continue
            cls = "t low" if logprob is not None and logprob < math.log(0.1) else "t"
            title = html.escape(_token_title(data, node, i), quote=True).replace("\n", "&#10;")
            out.append(f'<span class="{cls}" title="{title}">{html.escape(piece)}</span>')
        out.append("</span>")
    return "".join(out)


def _summary_text(text: str, limit: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def render_html(data: SessionData, branch: str = "all") -> str:
    """One self-contained page: the cursor's path, then (``all``) every branch as
    nested ``<details>``. Hovering a token shows its probability and alternatives."""
    esc = html.escape
    path = data.cursor_node.path()
    on_path = {node.id for node in path}
    chat = is_chat(data)
    title = data.name or "loomterm session"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta name="generator" content="loomterm {esc(__version__)}">',
        f"<title>{esc(title)} \u00b7 loomterm</title>",
        f"<style>\n{CSS}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="info">{esc(_model_name(data))} \u00b7 last change {esc(_when(data.modified))}'
        f" \u00b7 {len(data.tree.nodes) - 1} nodes</p>",
        '<p class="legend"><span class="o-user">typed</span><span class="o-model">generated'
        '</span><span class="o-edit">edited</span><span class="approx">approximate KV</span>'
        "hover a token for its probability</p>",
        '<section id="path">',
        "<h2>Current path</h2>",
        f'<div class="doc">{_html_tokens(data, path)}</div>',
        "</section>",
    ]
    if branch == "all":
        parts.append('<section id="tree">')
        parts.append("<h2>Every branch</h2>")
        stack: list[tuple[str, Node | None, str]] = [("open", data.tree.root, "")]
        while stack:
            action, start, label = stack.pop()
            if action == "close":
                parts.append("</details>")
                continue
            assert start is not None
            nodes = chain(start)
            text = "".join(data.text(n) for n in nodes)
            is_root = start is data.tree.root
            if not is_root:
                current = (
                    ' <span class="cur">\u25c0 current path</span>' if start.id in on_path else ""
                )
                bookmark = "".join(f" \u00b7 {esc(b)}" for b in (_bookmark(n) for n in nodes) if b)
                opened = " open" if start.id in on_path else ""
                parts.append(
                    f'<details{opened} data-node="{start.id}"><summary>{esc(label)} \u00b7 '
                    f"{esc(author(start, chat))}{bookmark}{current} \u2014 "
                    f"{esc(_summary_text(text))}</summary>"
                )
                stack.append(("close", None, ""))
            parts.append(f'<div class="doc">{_html_tokens(data, nodes)}</div>' if text else "")
            kids = nodes[-1].children
            for i in reversed(range(len(kids))):
                stack.append(("open", kids[i], f"alternative {i + 1} of {len(kids)}"))
        parts.append("</section>")
    parts.extend(["</body>", "</html>"])
    return "\n".join(part for part in parts if part) + "\n"


# -- entry points ---------------------------------------------------------------------


def format_for(output: str | os.PathLike | None, fmt: str | None) -> str:
    """The format asked for, else the one the output file's suffix names, else md."""
    if fmt:
        if fmt not in FORMATS:
            raise ExportError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return fmt
    if output is not None:
        return SUFFIXES.get(Path(output).suffix.lower(), "md")
    return "md"


def render(data: SessionData, fmt: str = "md", branch: str | None = None) -> str:
    """``data`` in format ``fmt``. ``branch``: ``current`` (the cursor's path) or
    ``all``; default: ``current`` for md and txt, ``all`` for json and html (JSON with
    ``current`` holds just the path's nodes)."""
    if branch not in (None, "current", "all"):
        raise ExportError(f"unknown branch choice {branch!r}: use current or all")
    if fmt == "md":
        return render_markdown(data, branch or "current")
    if fmt == "txt":
        return render_text(data, branch or "current")
    if fmt == "json":
        return render_json(path_only(data) if branch == "current" else data)
    if fmt == "html":
        return render_html(data, branch or "all")
    raise ExportError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` all at once: a temporary file beside it, synced, then
    renamed over it. On any failure the old file (if any) is untouched and no
    temporary file is left behind."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
