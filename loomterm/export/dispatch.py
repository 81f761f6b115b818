"""Choosing a format: :func:`render` out, :func:`read_import` in, and writing the result."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loomterm import atomic
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


def render(data: SessionData, fmt: str = "md", branch: str | None = None) -> str:
    """``data`` in format ``fmt``. ``branch``: ``current`` (the cursor's path) or
    ``all``; default: ``current`` for md and txt, ``all`` for json and html (JSON with
    ``current`` holds just the path's nodes). ``jsonl``: the ratings as preference pairs
    (``export.preferences``), from the whole tree."""
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
    if fmt == "jsonl":  # preference pairs come from every branch point, whatever ``branch``
        return render_preferences(data)
    raise ExportError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")


def read_import(path: str | os.PathLike) -> SessionData | TextTree:
    """Read a file to import: loomterm JSON (with tokens: SessionData; without: a
    TextTree) or a socketteer/loom tree (a TextTree)."""
    try:
        with open(path, encoding="utf-8") as handle:
            obj = json.load(handle)
    except FileNotFoundError:
        raise import_error(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise import_error(path, str(getattr(exc, "strerror", None) or exc)) from None
    except json.JSONDecodeError as exc:
        raise import_error(path, f"not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # Python's JSON reader recurses once per level
        raise import_error(path, "nested too deeply to read (about 1000 levels at most)") from None
    if isinstance(obj, dict) and obj.get("format") == JSON_FORMAT:
        return from_json_dict(obj, os.fspath(path))
    if looks_like_socketteer(obj):
        return from_socketteer(obj, os.fspath(path))
    raise import_error(path, "neither a loomterm JSON tree nor a socketteer/loom tree")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` all at once (through :func:`loomterm.atomic.write_atomic`):
    on any failure the old file (if any) is untouched, no temporary file is left behind,
    and :class:`ExportError` says why in one line."""
    try:
        atomic.write_atomic(path, text)
    except OSError as exc:
        raise ExportError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None
