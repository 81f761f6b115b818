"""Choosing a format: :func:`render` out, :func:`read_import` in, and writing the result."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loomterm import atomic
from loomterm.export import foreign
from loomterm.export.errors import ExportError, import_error
from loomterm.export.html_page import render_html
from loomterm.export.json_tree import JSON_FORMAT, from_json_dict, render_json
from loomterm.export.markdown import render_markdown
from loomterm.export.plain_text import render_text
from loomterm.export.preferences import render_preferences
from loomterm.export.socketteer import from_socketteer, looks_like_socketteer
from loomterm.export.text_tree import TextTree
from loomterm.export.views import path_only
from loomterm.store import SessionData

FORMATS = ("md", "txt", "json", "html", "jsonl")
SUFFIXES = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".json": "json",
    ".html": "html",
    ".htm": "html",
    ".jsonl": "jsonl",
}


def format_for(output: str | os.PathLike | None, fmt: str | None) -> str:
    """The format asked for, else the one the output file's suffix names, else md."""
    if fmt:
        if fmt not in FORMATS:
            raise ExportError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return fmt
    if output is not None:
        return SUFFIXES.get(Path(output).suffix.lower(), "md")
    return "md"


def render(
    data: SessionData, fmt: str = "md", branch: str | None = None, attribution: bool = False
) -> str:
    """``data`` in format ``fmt``. ``branch``: ``current`` (the cursor's path) or
    ``all``; default: ``current`` for md and txt, ``all`` for json and html (JSON with
    ``current`` holds just the path's nodes). ``jsonl``: the ratings as preference pairs
    (``export.preferences``), from the whole tree. ``attribution``: Markdown labels who
    wrote each part (the other formats ignore it: JSON and HTML always keep it)."""
    if branch not in (None, "current", "all"):
        raise ExportError(f"unknown branch choice {branch!r}: use current or all")
    if fmt == "md":
        return render_markdown(data, branch or "current", attribution)
    if fmt == "txt":
        return render_text(data, branch or "current")
    if fmt == "json":
        return render_json(path_only(data) if branch == "current" else data)
    if fmt == "html":
        return render_html(data, branch or "all")
    if fmt == "jsonl":  # preference pairs come from every branch point, whatever ``branch``
        return render_preferences(data)
    raise ExportError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")


def read_import(path: str | os.PathLike) -> SessionData | TextTree:
    """Read a file to import, its format found from its content: loomterm JSON (with
    tokens: SessionData; without: a TextTree), a socketteer/loom tree, or a file of a
    tool loom users come from (:mod:`loomterm.export.foreign`: KoboldAI, SillyTavern,
    text-generation-webui, mikupad, loomsidian, exoloom, Tapestry Loom's Obsidian notes),
    each a TextTree."""
    name = Path(path).stem
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise import_error(path, "no such file") from None
    except OSError as exc:
        raise import_error(path, str(exc.strerror or exc)) from None
    if foreign.is_tapestry(raw[:64]):
        raise import_error(path, "a Tapestry Loom weave in its binary format, which loomterm cannot read (it reads Tapestry's older Obsidian notes, and the socketteer/loom, loomsidian and exoloom files Tapestry imports)")  # fmt: skip
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise import_error(path, f"not UTF-8 text (byte {exc.start})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            found = foreign.read_text(text, name)
        except foreign.TapestryError as why:
            raise import_error(path, f"a Tapestry Loom note, but {why}") from None
        if found is not None:
            return found[1]
        raise import_error(path, f"not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # Python's JSON reader recurses once per level
        raise import_error(path, "nested too deeply to read (about 1000 levels at most)") from None
    if isinstance(obj, dict) and obj.get("format") == JSON_FORMAT:
        return from_json_dict(obj, os.fspath(path))
    if looks_like_socketteer(obj):
        return from_socketteer(obj, os.fspath(path))
    found = foreign.read_foreign(obj, name)
    if found is not None:
        return found[1]
    raise import_error(path, "not a format loomterm knows: loomterm or socketteer/loom JSON, KoboldAI, SillyTavern, text-generation-webui, mikupad, loomsidian, exoloom or a Tapestry Loom note")  # fmt: skip


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` all at once (through :func:`loomterm.atomic.write_atomic`):
    on any failure the old file (if any) is untouched, no temporary file is left behind,
    and :class:`ExportError` says why in one line."""
    try:
        atomic.write_atomic(path, text)
    except OSError as exc:
        raise ExportError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None
