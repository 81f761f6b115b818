"""The loomterm JSON tree, out (:func:`render_json`) and in (:func:`from_json_dict`).

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
      "models": {                       # every model that wrote into the tree, by key
        "SmolLM2-135M-Instruct": {"name": "...", "kind": "local", "source": "...",
                                  "precision": "float32", "fingerprint": {...}},
        "server": {"name": "...", "kind": "llama-server", "source": "http://host:port", ...}
      },
      "settings": {...},                # per-session settings (sampling defaults...)
      "contexts": {"<id>": {...}},      # context versions nodes were generated with
                                        # (meta "context": memory, authors_note,
                                        # authors_note_depth, world_info); may be absent
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
      "rating": 1 | -1 | null,          # good, bad or unrated (the same as meta.rating)
      "meta": {"role": "assistant", "bookmark": true, "hidden": false,
               "model": "server", ...}   # model: the key of the model that wrote it
    }

Non-finite floats (a logprob of minus infinity) are written as the strings ``"-inf"``,
``"inf"`` or ``"nan"`` so the file stays strict JSON. A file whose nodes have ``text``
but no ``tokens`` is a text-only tree: importing it tokenizes the text with a model.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from loomterm.export.errors import import_error
from loomterm.export.text_tree import TextTree
from loomterm.store import SessionData
from loomterm.tree import BAD, GOOD, RATING, Node, Origin, Tree, rating_of

JSON_FORMAT = "loomterm-tree"
JSON_VERSION = 1


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
                "rating": rating_of(node),
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
        "models": data.models,
        "settings": data.settings,
        "contexts": data.contexts,
        "cursor": data.cursor,
        "root": data.tree.root.id,
        "nodes": nodes,
        "vocab": {str(token): piece for token, piece in sorted(data.vocab.items())},
    }


def render_json(data: SessionData) -> str:
    return json.dumps(to_json_dict(data), ensure_ascii=False, indent=1, allow_nan=False) + "\n"


def from_json_dict(obj: dict[str, Any], source: str = "<json>") -> SessionData | TextTree:
    """Read a loomterm JSON tree; a tree without tokens comes back as a TextTree."""
    if obj.get("format") != JSON_FORMAT:
        raise import_error(source, "not a loomterm JSON tree")
    version = obj.get("version")
    if not isinstance(version, int) or version > JSON_VERSION:
        raise import_error(source, f"JSON tree version {version} is newer than this loomterm reads")
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
                meta=_meta_in(item),
            )
            pieces[node_id] = node_pieces
        _link(raw, nodes)
        tree = Tree.from_nodes(nodes[root_id], nodes)
        vocab = {int(token): str(piece) for token, piece in (obj.get("vocab") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise import_error(source, f"malformed JSON tree ({exc})") from None
    return SessionData(
        tree=tree,
        pieces=pieces,
        cursor=cursor if cursor in nodes else root_id,
        settings=dict(obj.get("settings") or {}),
        contexts=dict(obj.get("contexts") or {}),
        model=dict(obj.get("model") or {}),
        models=dict(obj.get("models") or {}),
        vocab=vocab,
        created=float(obj.get("created") or 0.0),
        modified=float(obj.get("modified") or 0.0),
        name=str(obj.get("name") or ""),
    )


def _meta_in(item: dict[str, Any]) -> dict[str, Any]:
    """A node's meta, with its ``rating`` field (a file written by hand may have only
    that) kept in ``meta["rating"]`` where ratings live."""
    meta = dict(item.get("meta") or {})
    rating = item.get("rating")
    if rating in (GOOD, BAD) and not isinstance(rating, bool):
        meta.setdefault(RATING, rating)
    return meta


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
        meta={i: _meta_in(item) for i, item in raw.items()},
        cursor=cursor if cursor in raw else root_id,
        settings=dict(obj.get("settings") or {}),
        model=dict(obj.get("model") or {}),
        name=str(obj.get("name") or ""),
        sampling={i: item.get("sampling") for i, item in raw.items()},
        seeds={i: item.get("seed") for i, item in raw.items()},
    )
