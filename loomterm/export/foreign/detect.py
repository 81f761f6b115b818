"""Which tool wrote a file: each reader's ``looks_like`` test on the parsed content
(never the file's name), first match wins, most specific first."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from loomterm.export.foreign.exoloom import from_exoloom, looks_like_exoloom
from loomterm.export.foreign.kobold import from_kobold, looks_like_kobold
from loomterm.export.foreign.loomsidian import from_loomsidian, looks_like_loomsidian
from loomterm.export.foreign.mikupad import from_mikupad, looks_like_mikupad
from loomterm.export.foreign.sillytavern import from_sillytavern, looks_like_sillytavern
from loomterm.export.foreign.tapestry import from_tapestry, parse_weave, weave_text
from loomterm.export.foreign.textgen import from_textgen, looks_like_textgen
from loomterm.export.text_tree import TextTree

TAPESTRY_MAGIC = b"VersionedTapestryWeave__"

# (name shown to the user, test, reader), for files that are one JSON value.
FOREIGN_FORMATS: list[tuple[str, Callable[[Any], bool], Callable[..., TextTree]]] = [
    ("exoloom", looks_like_exoloom, from_exoloom),
    ("mikupad", looks_like_mikupad, from_mikupad),
    ("KoboldAI", looks_like_kobold, from_kobold),
    ("text-generation-webui", looks_like_textgen, from_textgen),
    ("loomsidian", looks_like_loomsidian, from_loomsidian),
]


def read_foreign(obj: Any, name: str = "") -> tuple[str, TextTree] | None:
    """(the tool's name, its tree) for a parsed JSON value another tool wrote, or None."""
    for label, looks_like, read in FOREIGN_FORMATS:
        if looks_like(obj):
            tree = read(obj, name)
            tree.tool = label
            return label, tree
    return None


def read_json_lines(text: str, name: str = "") -> tuple[str, TextTree] | None:
    """(the tool's name, its tree) for a JSON Lines file (SillyTavern's chats), or None
    when ``text`` is not JSON Lines of a known tool."""
    lines = []
    for line in text.splitlines():
        if line.strip():
            try:
                lines.append(json.loads(line))
            except (ValueError, RecursionError):
                return None
    if looks_like_sillytavern(lines):
        tree = from_sillytavern(lines, name)
        tree.tool = "SillyTavern"
        return tree.tool, tree
    return None


def read_text(text: str, name: str = "") -> tuple[str, TextTree] | None:
    """(the tool's name, its tree) for a file that is not one JSON value: SillyTavern's
    JSON Lines, or a Markdown note of Tapestry Loom's Obsidian plugin holding a weave;
    None when it is neither. Raises :class:`~loomterm.export.foreign.tapestry.TapestryError` (one line) for a note whose
    weave cannot be read."""
    found = read_json_lines(text, name)
    if found is not None:
        return found
    serialized = weave_text(text)
    if serialized is None:
        return None
    tree = from_tapestry(parse_weave(serialized), name)
    tree.tool = "Tapestry Loom (Obsidian plugin)"
    return tree.tool, tree


def is_tapestry(head: bytes) -> bool:
    """Tapestry Loom's binary weave (an rkyv archive after a versioned header)."""
    return head.startswith(TAPESTRY_MAGIC)
