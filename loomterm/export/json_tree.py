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
from loomterm.store import SessionData, fields
from loomterm.tree import BAD, GOOD, RATING, Node, Origin, Tree, rating_of

JSON_FORMAT = "loomterm-tree"
JSON_VERSION = 1


def _float_out(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _float_in(value: Any, field: str) -> float | None:
    """A logprob as written: a number, null, or "inf", "-inf", "nan"."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        value = float(value)
    return fields.logprob(value, field)


def _list(value: Any, field: str) -> list:
    if not isinstance(value, list):
        raise fields.FieldError(f"{field} must be a list, not {type(value).__name__}")
    return value


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
    """Read a loomterm JSON tree; a tree without tokens comes back as a TextTree.

    Every field is checked (:mod:`loomterm.store.fields`) before anything is built: a
    wrong type, a token id that is no id, an unknown, duplicate or cyclic node id is
    refused with one line naming the field, and the file is only read."""
    if obj.get("format") != JSON_FORMAT:
        raise import_error(source, "not a loomterm JSON tree")
    version = obj.get("version")
    if not fields.is_whole(version) or version > JSON_VERSION:
        raise import_error(source, f"JSON tree version {version} is newer than this loomterm reads")
    try:
        return _read_tree(obj)
    except fields.FieldError as exc:
        raise import_error(source, str(exc)) from None


def _read_tree(obj: dict[str, Any]) -> SessionData | TextTree:
    raw: dict[int, dict] = {}
    for index, item in enumerate(_list(obj.get("nodes"), "nodes")):
        fields.table(item, f"nodes[{index}]")
        node_id = fields.node_id(item.get("id"), f"nodes[{index}].id")
        if node_id in raw:
            raise fields.FieldError(f"node id {node_id} is used twice")
        raw[node_id] = item
    root_id = fields.node_id(obj.get("root", 0), "root")
    cursor = fields.node_id(obj.get("cursor", root_id), "cursor")
    _check_links(raw, root_id)
    text_only = any("tokens" not in item for item in raw.values())
    for node_id, item in raw.items():
        _check_node_fields(node_id, item)
    session = _session_fields(obj)
    if text_only:
        return _text_tree_from_json(obj, raw, root_id, cursor)
    nodes: dict[int, Node] = {}
    pieces: dict[int, list[str]] = {}
    for node_id, item in raw.items():
        nodes[node_id], pieces[node_id] = _node_in(node_id, item)
    _link(raw, nodes)
    tree = Tree.from_nodes(nodes[root_id], nodes)
    vocab = {}
    for token, piece in fields.table(obj.get("vocab") or {}, "vocab").items():
        if not token.isdecimal():
            raise fields.FieldError(f"vocab key {token[:40]!r} must be a token id")
        if not isinstance(piece, str):
            raise fields.FieldError(f"vocab[{token}] must be text, not {type(piece).__name__}")
        vocab[fields.token_id(int(token), f"vocab key {token[:40]}")] = piece
    return SessionData(
        tree=tree,
        pieces=pieces,
        cursor=cursor if cursor in nodes else root_id,
        **session,
        vocab=vocab,
    )


def _session_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The tree's own fields besides its nodes, checked."""
    models = fields.table(obj.get("models") or {}, "models")
    for key, record in models.items():
        fields.table(record, f"models[{key[:40]!r}]")
    contexts = fields.table(obj.get("contexts") or {}, "contexts")
    for key, record in contexts.items():
        fields.table(record, f"contexts[{key[:40]!r}]")
    model = fields.table(obj.get("model") or {}, "model")
    if model.get("fingerprint") is not None:
        fields.table(model["fingerprint"], "model.fingerprint")
    name = obj.get("name") or ""
    if not isinstance(name, str):
        raise fields.FieldError(f"name must be text, not {type(name).__name__}")
    return {
        "settings": dict(fields.table(obj.get("settings") or {}, "settings")),
        "contexts": dict(contexts),
        "model": dict(model),
        "models": dict(models),
        "created": fields.moment(obj.get("created") or 0.0, "created"),
        "modified": fields.moment(obj.get("modified") or 0.0, "modified"),
        "name": name,
    }


def _check_node_fields(node_id: int, item: dict[str, Any]) -> None:
    """The fields a node has whether or not it carries tokens."""
    at = f"node {node_id}"
    fields.origin(item.get("origin", "import"), f"{at}: origin")
    fields.sampling(item.get("sampling"), f"{at}: sampling")
    fields.seed(item.get("seed"), f"{at}: seed")
    if "created" in item:
        fields.moment(item["created"], f"{at}: created")
    fields.meta(item.get("meta") or {}, f"{at}: meta")
    if not isinstance(item.get("text") or "", str):
        raise fields.FieldError(f"{at}: text must be text, not {type(item['text']).__name__}")
    if not isinstance(item.get("approx", False), bool):
        raise fields.FieldError(f"{at}: approx must be true or false")


def _node_in(node_id: int, item: dict[str, Any]) -> tuple[Node, list[str]]:
    """One node with tokens, and its pieces, from its checked fields."""
    at = f"node {node_id}"
    tokens = [
        fields.token_id(t, f"{at}: tokens[{i}]")
        for i, t in enumerate(_list(item["tokens"], f"{at}: tokens"))
    ]
    n = len(tokens)
    node_pieces = _list(item.get("pieces") or [], f"{at}: pieces")
    if len(node_pieces) != n:
        raise fields.FieldError(f"{at} has {len(node_pieces)} pieces for {n} tokens")
    for i, piece in enumerate(node_pieces):
        if not isinstance(piece, str):
            raise fields.FieldError(f"{at}: pieces[{i}] must be text, not {type(piece).__name__}")
    logprobs = [
        _float_in(lp, f"{at}: logprobs[{i}]")
        for i, lp in enumerate(_list(item.get("logprobs") or [None] * n, f"{at}: logprobs"))
    ]
    top = [
        _alternatives_in(alts, f"{at}: top[{i}]")
        for i, alts in enumerate(_list(item.get("top") or [None] * n, f"{at}: top"))
    ]
    if len(logprobs) != n or len(top) != n:
        raise fields.FieldError(f"{at}: logprobs or top do not match its tokens")
    node = Node(
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
    return node, list(node_pieces)


def _alternatives_in(alts: Any, field: str) -> list[tuple[int, float | None]] | None:
    """One token's alternatives: null, or [token id, logprob] pairs."""
    if alts is None:
        return None
    out = []
    for i, pair in enumerate(_list(alts, field)):
        if not isinstance(pair, list) or len(pair) != 2:
            raise fields.FieldError(f"{field}[{i}] must be a [token id, logprob] pair")
        lp = _float_in(pair[1], f"{field}[{i}]")
        if lp is None:
            raise fields.FieldError(f"{field}[{i}] has no logprob")
        out.append((fields.token_id(pair[0], f"{field}[{i}]"), lp))
    return out


def _meta_in(item: dict[str, Any]) -> dict[str, Any]:
    """A node's meta, with its ``rating`` field (a file written by hand may have only
    that) kept in ``meta["rating"]`` where ratings live."""
    meta = dict(item.get("meta") or {})
    rating = item.get("rating")
    if rating in (GOOD, BAD) and not isinstance(rating, bool):
        meta.setdefault(RATING, rating)
    return meta


def _check_links(raw: dict[int, dict], root_id: int) -> None:
    """Parents and children agree, and every node hangs from the root (``raw``'s ids
    are checked; parents and children are checked here)."""
    if root_id not in raw:
        raise fields.FieldError(f"root {root_id} is not among the nodes")
    for node_id, item in raw.items():
        parent = item.get("parent")
        if parent is not None:
            fields.node_id(parent, f"node {node_id}: parent")
        if (parent is None) != (node_id == root_id):
            raise fields.FieldError(f"node {node_id} has parent {parent}")
        kids = _list(item.get("children") or [], f"node {node_id}: children")
        for child_id in kids:
            fields.node_id(child_id, f"node {node_id}: children")
            child = raw.get(child_id)
            if child is None or child.get("parent") != node_id:
                raise fields.FieldError(
                    f"node {child_id} is listed under {node_id} but hangs elsewhere"
                )
        if len(set(kids)) != len(kids):
            raise fields.FieldError(f"node {node_id} lists a child twice")
    reached, stack = 0, [root_id]
    while stack:
        reached += 1
        stack.extend(raw[stack.pop()].get("children") or [])
        if reached > len(raw):
            raise fields.FieldError("the nodes form a cycle")
    if reached != len(raw):
        raise fields.FieldError(f"{len(raw) - reached} nodes are not reachable from the root")


def _link(raw: dict[int, dict], nodes: dict[int, Node]) -> None:
    """Hang nodes from their parents in the order each parent's ``children`` lists."""
    for node_id, item in raw.items():
        for child_id in item.get("children") or []:
            child = nodes[child_id]
            child.parent = nodes[node_id]
            nodes[node_id].children.append(child)


def _text_tree_from_json(obj: dict, raw: dict[int, dict], root_id: int, cursor: int) -> TextTree:
    return TextTree(
        root=root_id,
        parents={i: item.get("parent") for i, item in raw.items()},
        children={i: list(item.get("children") or []) for i, item in raw.items()},
        texts={i: str(item.get("text") or "") for i, item in raw.items()},
        origins={i: Origin(item.get("origin", "import")) for i, item in raw.items()},
        created={i: float(item.get("created", time.time())) for i, item in raw.items()},
        meta={i: _meta_in(item) for i, item in raw.items()},
        cursor=cursor if cursor in raw else root_id,
        settings=dict(fields.table(obj.get("settings") or {}, "settings")),
        model=dict(fields.table(obj.get("model") or {}, "model")),
        name=str(obj.get("name") or ""),
        sampling={i: item.get("sampling") for i, item in raw.items()},
        seeds={i: item.get("seed") for i, item in raw.items()},
    )
