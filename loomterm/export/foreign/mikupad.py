"""mikupad sessions: one session's export (every property a JSON string inside the
JSON object) and the whole-database export (``Sessions``/``Names`` stores).

A session's ``prompt`` is a flat list of chunks: the writer's (``type: user``) and the
model's (one chunk a token). Runs of the same author become one node each, so the
document reads as it did in mikupad. mikupad keeps no tree (only each token's top
alternatives, which need mikupad's tokens), so a session is one path; a database's
sessions become branches from the root, each named by its session name. Memory, the
author's note (with its prefix and suffix) and world info come along. The API key
(``endpointAPIKey``, never redacted by mikupad) is dropped.
"""

from __future__ import annotations

import json
from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, table_of, tables_in, text_of, whole_number
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

SESSION_KEYS = {"prompt", "memoryTokens", "authorNoteTokens", "worldInfo", "endpoint"}


def looks_like_mikupad(obj: Any) -> bool:
    """A mikupad session (plain or with each value encoded again) or database export."""
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("Sessions"), list):
        return True
    return "prompt" in obj and len(SESSION_KEYS & set(obj)) >= 2


def from_mikupad(obj: dict[str, Any], name: str = "") -> TextTree:
    """Read a mikupad session or database export."""
    build = TreeBuilder(name)
    if isinstance(obj.get("Sessions"), list):
        names = {
            str(item.get("key")): text_of(item.get("value")) for item in tables_in(obj.get("Names"))
        }
        sessions = [
            item for item in obj["Sessions"]
            if isinstance(item, dict) and isinstance(item.get("value"), dict)
        ]  # fmt: skip
        selected = next(
            (str(item.get("value")) for item in tables_in(obj["Sessions"]) if item.get("key") == "selectedSessionId"),
            None,
        )  # fmt: skip
        cursor = chosen = 0
        for item in sessions:
            session = _decoded(item["value"])
            title = names.get(str(item.get("key"))) or f"session {item.get('key')}"
            cursor = _session(build, session, {"imported_name": title})
            chosen = cursor if str(item.get("key")) == selected else chosen
        cursor = chosen or cursor  # the session mikupad had open, else the last
        if len(sessions) > 1:
            build.notice(f"{len(sessions)} mikupad sessions became {len(sessions)} branches from the start")  # fmt: skip
        return build.finish(cursor or None)
    session = _decoded(obj)
    build.tree.name = name or text_of(session.get("name"))
    return build.finish(_session(build, session, {}))


def _decoded(session: dict[str, Any]) -> dict[str, Any]:
    """A session's properties, each decoded once more when it is a JSON string (the
    single-session export encodes every value again; ``name`` is plain text)."""
    out: dict[str, Any] = {}
    for key, value in session.items():
        if isinstance(value, str) and key != "name":
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):
                pass
        out[key] = value
    return out


def _session(build: TreeBuilder, session: dict[str, Any], meta: dict[str, Any]) -> int:
    """One session's chunks as a path below the root; returns its last node."""
    node, first = 0, True
    for text, origin in _runs(session.get("prompt")):
        node = build.add(node, text, origin, meta=meta if first else None)
        first = False
    if text_of(session.get("endpointAPIKey")):
        build.notice("dropped the API key saved in the mikupad session (endpointAPIKey)")
    memory, note = table_of(session.get("memoryTokens")), table_of(session.get("authorNoteTokens"))
    note_text = text_of(note.get("text"))
    if note_text.strip():
        note_text = text_of(note.get("prefix")) + note_text + text_of(note.get("suffix"))
    world = tables_in(table_of(session.get("worldInfo")).get("entries"))
    entries = [(e.get("keys"), e.get("text")) for e in world]
    has_context = bool(text_of(memory.get("text")).strip() or note_text.strip() or entries)
    if not build.tree.settings:  # a database's first session gives the context
        build.context(text_of(memory.get("text")), note_text, entries)
        depth = session.get("authorNoteDepth")
        if note_text and whole_number(depth) is not None:
            build.tree.settings["authors_note_depth"] = depth
    elif has_context:
        build.notice("kept the first session's memory, author's note and world info (a session has one of each); the other sessions' were left out")  # fmt: skip
    return node


def _runs(prompt: Any) -> list[tuple[str, Origin]]:
    """The prompt's chunks joined into runs of one author: (text, origin). Each run's
    pieces are joined once (adding to a string one token at a time is quadratic)."""
    runs: list[tuple[list[str], Origin]] = []
    for chunk in prompt if isinstance(prompt, list) else []:
        if not isinstance(chunk, dict):
            continue
        origin = Origin.USER if chunk.get("type") == "user" else Origin.MODEL
        text = text_of(chunk.get("content"))
        if runs and runs[-1][1] == origin:
            runs[-1][0].append(text)
        elif text:
            runs.append(([text], origin))
    return [("".join(pieces), origin) for pieces, origin in runs]
