"""Tapestry Loom's older weaves: its Obsidian plugin's (2025, the repository's ``legacy``
branch), a Markdown note whose YAML front matter holds the weave.

The plugin wrote the weave with ``serialize-javascript`` under ``TapestryLoomWeave``
(JSON in which a ``Map`` or ``Set`` is written ``new Map([...])`` / ``new Set([...])``
and an unset field ``undefined``), or that text deflated (zlib) and base64-encoded under
``TapestryLoomWeaveCompressed``. The plugin read it back with ``eval``; this reader never
evaluates anything: outside JSON strings it drops the two constructors (leaving their
arrays) and reads ``undefined`` as null, then parses JSON.

A weave: ``nodes`` (id → ``{identifier, content, model?, parentNode?, parameters?}``,
``content`` a text or ``[probability, token]`` pairs), ``rootNodes``, ``nodeChildren``
(id → ordered child ids), ``currentNode``, ``bookmarks`` and ``models`` (id →
``{label, color?}``). Nodes with a model are the model's, the others the writer's. No
keys or endpoints are stored in a weave (the plugin keeps them in its settings).
Tapestry's current format is binary (:data:`~loomterm.export.foreign.detect.TAPESTRY_MAGIC`)
and is refused in one line.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, table_of, text_of
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

PLAIN_KEY = "TapestryLoomWeave"
COMPRESSED_KEY = "TapestryLoomWeaveCompressed"
MAX_INFLATED = 512 * 1024 * 1024  # a compressed weave inflating past this is refused
# A JSON string (unrolled, so linear), a constructor serialize-javascript writes for a
# Map or Set, its closing parenthesis, or ``undefined``.
_JS_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|new\s+(?:Map|Set)\s*\(|\)|\bundefined\b')
_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)


class TapestryError(ValueError):
    """A note that names a Tapestry weave which cannot be read (one line)."""


def weave_text(text: str) -> str | None:
    """The serialized weave in a Markdown note's front matter, or None when the note
    holds none. Raises :class:`TapestryError` for one that cannot be read."""
    found = _FRONT_MATTER.match(text)
    if not found or (PLAIN_KEY not in found.group(1) and COMPRESSED_KEY not in found.group(1)):
        return None
    import yaml  # only for such notes: the import of every other file never loads it

    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C one where built
        front = yaml.load(found.group(1), Loader=loader)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError) as exc:
        raise TapestryError(f"its front matter is not YAML ({_first_line(exc)})") from None
    if not isinstance(front, dict):
        return None
    if isinstance(front.get(COMPRESSED_KEY), str):
        return _inflated(front[COMPRESSED_KEY])
    if isinstance(front.get(PLAIN_KEY), str):
        return front[PLAIN_KEY]
    return None


def _inflated(encoded: str) -> str:
    try:
        packed = base64.b64decode("".join(encoded.split()), validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, MAX_INFLATED)
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise TapestryError(f"its compressed weave cannot be unpacked ({exc})") from None
    if inflater.unconsumed_tail:
        raise TapestryError(f"its compressed weave unpacks to more than {MAX_INFLATED >> 20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TapestryError(f"its compressed weave is not UTF-8 (byte {exc.start})") from None


def as_json(serialized: str) -> str:
    """serialize-javascript's text as JSON: ``new Map(``/``new Set(`` and their closing
    parenthesis dropped, ``undefined`` made null, strings untouched. Linear time."""

    def swap(found: re.Match[str]) -> str:
        token = found.group()
        if token.startswith('"'):
            return token
        return "null" if token == "undefined" else ""

    return _JS_TOKEN.sub(swap, serialized)


def parse_weave(serialized: str) -> dict[str, Any]:
    """The weave object of a note's serialized weave. Raises :class:`TapestryError`."""
    try:
        weave = json.loads(as_json(serialized))
    except json.JSONDecodeError as exc:
        raise TapestryError(f"its weave is not one this reader knows ({exc.msg})") from None
    except RecursionError:
        raise TapestryError("its weave is nested too deeply to read") from None
    if not looks_like_tapestry(weave):
        raise TapestryError("its weave has no nodes")
    return weave


def looks_like_tapestry(obj: Any) -> bool:
    """A legacy weave once parsed: ``nodes`` and ``rootNodes`` (maps as pair lists)."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("nodes"), (dict, list))
        and isinstance(obj.get("rootNodes"), list)
    )


def from_tapestry(weave: dict[str, Any], name: str = "") -> TextTree:
    """Read a legacy weave (:func:`parse_weave`'s object)."""
    build = TreeBuilder(name)
    nodes = {str(k): v for k, v in _pairs(weave.get("nodes")) if isinstance(v, dict)}
    children = {str(k): v for k, v in _pairs(weave.get("nodeChildren")) if isinstance(v, list)}
    models = {str(k): table_of(v) for k, v in _pairs(weave.get("models"))}
    bookmarks = weave.get("bookmarks")
    marked = {str(b) for b in bookmarks} if isinstance(bookmarks, list) else set()
    made: dict[str, int] = {}
    stack = [(str(key), 0) for key in reversed(weave["rootNodes"])]
    while stack:
        key, parent = stack.pop()
        node = nodes.get(key)
        if key in made or node is None:
            continue
        meta: dict[str, Any] = {"bookmark": True} if key in marked else {}
        model = models.get(str(node.get("model"))) if node.get("model") is not None else None
        if model is not None and text_of(model.get("label")):
            meta["imported_model"] = model["label"]
        origin = Origin.USER if node.get("model") is None else Origin.MODEL
        made[key] = build.add(parent, _content(node.get("content")), origin, meta=meta)
        stack.extend((str(kid), made[key]) for kid in reversed(children.get(key, [])))
    lost = len(nodes) - len(made)
    if lost:
        build.notice(f"skipped {lost} nodes that no root reaches")
    current = weave.get("currentNode")
    return build.finish(made.get(str(current)) if current is not None else None)


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    """A Map as serialize-javascript wrote it (``[[key, value], ...]``) or an object."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return [(p[0], p[1]) for p in value if isinstance(p, list) and len(p) == 2]
    return []


def _content(content: Any) -> str:
    """A node's text: its snippet, or its ``[probability, token]`` pairs' tokens."""
    if isinstance(content, list):
        return "".join(
            text_of(pair[1]) for pair in content if isinstance(pair, list) and len(pair) == 2
        )
    return text_of(content)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
