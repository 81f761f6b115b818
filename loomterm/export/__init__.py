"""Transcripts that leave the app, and trees that come in (this package's public names).

Headless: no model needed. Everything here works on :class:`~loomterm.store.SessionData`
(a tree plus each token's display text), so exporting a session reads its file and
never loads model weights.

Formats out (:func:`render`): ``md`` (the document as prose; who wrote what, optionally), ``txt`` (the bare text), ``json``
(the full tree, lossless; the ``loomterm-tree`` version 1 schema is documented in
:mod:`loomterm.export.json_tree`), ``html`` (one self-contained page) and ``jsonl``
(ratings as preferred and rejected continuations, :mod:`loomterm.export.preferences`). Formats in
(:func:`read_import`): loomterm JSON, socketteer/loom's JSON trees, and the files of the
tools loom users come from (:mod:`loomterm.export.foreign`).

Each module owns one thing:

- :mod:`~loomterm.export.dispatch`: choosing a format, :func:`render`,
  :func:`read_import` and :func:`write_atomic`;
- :mod:`~loomterm.export.views`: what every format shares (the path alone, authors,
  runs, chat turns without their template, chains);
- :mod:`~loomterm.export.markdown`, :mod:`~loomterm.export.plain_text`,
  :mod:`~loomterm.export.html_page`: one format each, out;
- :mod:`~loomterm.export.json_tree`: the loomterm JSON tree, out and in;
- :mod:`~loomterm.export.preferences`: ratings as preference pairs (JSON Lines), out;
- :mod:`~loomterm.export.socketteer`: socketteer/loom trees, in;
- :mod:`~loomterm.export.foreign`: KoboldAI, SillyTavern, text-generation-webui,
  mikupad, loomsidian and exoloom files, in;
- :mod:`~loomterm.export.text_tree`: trees known only by their text, and re-tokenizing
  them;
- :mod:`~loomterm.export.target`: where an export may write (never over a session,
  never over a file unasked), and :func:`write_export`;
- :mod:`~loomterm.export.errors`: :class:`ExportError`.
"""

from __future__ import annotations

from loomterm.export.dispatch import (
    FORMATS,
    SUFFIXES,
    format_for,
    read_import,
    render,
    write_atomic,
)
from loomterm.export.errors import ExportError
from loomterm.export.html_page import CSS, render_html
from loomterm.export.json_tree import (
    JSON_FORMAT,
    JSON_VERSION,
    from_json_dict,
    render_json,
    to_json_dict,
)
from loomterm.export.markdown import inline, prose, render_markdown, unprose
from loomterm.export.plain_text import render_text
from loomterm.export.preferences import preference_pairs, render_preferences
from loomterm.export.socketteer import SOCKETTEER_SOURCES, from_socketteer, looks_like_socketteer
from loomterm.export.target import TargetExists, check_target, is_session_file, write_export
from loomterm.export.text_tree import TextTree, retokenize_tree, text_tree_of
from loomterm.export.views import (
    ORIGIN_LABELS,
    Run,
    author,
    chain,
    chat_roles,
    is_chat,
    path_only,
    runs,
    strip_template,
    turns,
)

__all__ = [
    "CSS",
    "FORMATS",
    "JSON_FORMAT",
    "JSON_VERSION",
    "ORIGIN_LABELS",
    "SOCKETTEER_SOURCES",
    "SUFFIXES",
    "ExportError",
    "Run",
    "TargetExists",
    "TextTree",
    "author",
    "chain",
    "chat_roles",
    "check_target",
    "format_for",
    "from_json_dict",
    "from_socketteer",
    "inline",
    "is_chat",
    "is_session_file",
    "looks_like_socketteer",
    "path_only",
    "preference_pairs",
    "prose",
    "read_import",
    "render",
    "render_html",
    "render_json",
    "render_markdown",
    "render_preferences",
    "render_text",
    "retokenize_tree",
    "runs",
    "strip_template",
    "text_tree_of",
    "to_json_dict",
    "turns",
    "unprose",
    "write_atomic",
    "write_export",
]
