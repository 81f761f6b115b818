"""SillyTavern chats (``.jsonl``): a header line, then one message a line.

Each message becomes a node ``Name: text`` (on a new line after the first), the user's
as typed text and the character's as the model's. A message's swipes (``swipes``,
``swipe_id``) become siblings: the selected one goes on with the chat, the others are
leaves beside it, as a loom shows them. The author's note (``chat_metadata.note_prompt``)
and the Summarize extension's memory (a message's ``extra.memory``) come along; a chat
names its lorebook only, whose entries live in SillyTavern's own folder.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, text_of, whole_number
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

# 2023's "2023-4-21 @20h 02m 47s 124ms"
_HUMANIZED = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2}) @(\d{1,2})h (\d{1,2})m (\d{1,2})s")
_DATE_FORMATS = ("%B %d, %Y %I:%M%p", "%B %d, %Y %H:%M")  # 2024's "September 28, 2024 1:02am"


def looks_like_sillytavern(lines: list[Any]) -> bool:
    """A header (``user_name``/``character_name``/``chat_metadata``) then messages."""
    if not lines or not isinstance(lines[0], dict):
        return False
    header = lines[0]
    if not ({"user_name", "character_name", "chat_metadata"} & set(header)):
        return False
    return all(isinstance(line, dict) and "mes" in line for line in lines[1:])


def from_sillytavern(lines: list[dict[str, Any]], name: str = "") -> TextTree:
    """Read a SillyTavern chat (its lines, already parsed)."""
    build = TreeBuilder(name or text_of(lines[0].get("character_name")))
    node, memory = 0, ""
    for message in lines[1:]:
        speaker = text_of(message.get("name")) or ("You" if message.get("is_user") else "Character")  # fmt: skip
        origin = Origin.USER if message.get("is_user") else Origin.MODEL
        lead = f"\n{speaker}: " if node else f"{speaker}: "
        created = _when(message.get("send_date"))
        swipes = message.get("swipes")
        chosen = text_of(message.get("mes"))
        parent = node
        node = build.add(parent, lead + chosen, origin, created, _meta(message))
        if isinstance(swipes, list):
            selected = whole_number(message.get("swipe_id"), 0, len(swipes))
            for index, swipe in enumerate(swipes):
                if index != selected and isinstance(swipe, str) and swipe != chosen:
                    build.add(parent, lead + swipe, origin, created, {"swipe": index})
        extra = message.get("extra")
        if isinstance(extra, dict) and isinstance(extra.get("memory"), str):
            memory = extra["memory"]
    metadata = lines[0].get("chat_metadata")
    note, depth = "", None
    if isinstance(metadata, dict):
        note = text_of(metadata.get("note_prompt"))
        depth = metadata.get("note_depth")
        if isinstance(metadata.get("world_info"), str) and metadata["world_info"]:
            build.notice(f"the chat uses the lorebook {metadata['world_info']!r}, whose entries are in SillyTavern's worlds folder, not in this file")  # fmt: skip
    build.context(memory, note)
    if note and whole_number(depth) is not None:
        build.tree.settings["authors_note_depth"] = depth
    return build.finish(node)


def _meta(message: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    extra = message.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("model"), str):
        meta["imported_model"] = extra["model"]
    if message.get("is_system"):
        meta["system"] = True
    return meta


def _when(stamp: Any) -> float:
    """A message's ``send_date`` in any of SillyTavern's forms, as a Unix time."""
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        seconds = stamp / 1000 if stamp > 1e11 else stamp
        if 0 <= seconds < 1e10:
            return float(seconds)
    if isinstance(stamp, str):
        found = _HUMANIZED.match(stamp)
        try:
            if found:
                return datetime(*map(int, found.groups())).timestamp()
            for form in _DATE_FORMATS:
                try:
                    return datetime.strptime(stamp, form).timestamp()
                except ValueError:
                    continue
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            pass
    return time.time()
