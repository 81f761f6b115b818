"""Trees from the tools loom users come from, read by their content.

Each module reads one tool's files into a :class:`~loomterm.export.text_tree.TextTree`
(text only: a model tokenizes it on import), with the tool's alternatives as siblings
and its memory, author's note and world info as loomterm's settings of the same names.
Secrets a file carries (API keys, private endpoints, saved settings) are never read
into the tree: each one dropped is named in :attr:`TextTree.notices`, so the user is told.

- :mod:`~loomterm.export.foreign.kobold`: KoboldAI Client v1, KoboldAI Lite / koboldcpp
  (with ``altbranches``), KoboldAI United v2;
- :mod:`~loomterm.export.foreign.sillytavern`: SillyTavern chats (``.jsonl``, swipes);
- :mod:`~loomterm.export.foreign.textgen`: text-generation-webui chat histories;
- :mod:`~loomterm.export.foreign.mikupad`: mikupad sessions and database exports;
- :mod:`~loomterm.export.foreign.loomsidian`: the Obsidian Loom plugin's data and exports;
- :mod:`~loomterm.export.foreign.exoloom`: exoloom exports;
- :mod:`~loomterm.export.foreign.tapestry`: Tapestry Loom's older weaves (its Obsidian
  plugin's notes; its current binary format is refused in one line);
- :mod:`~loomterm.export.foreign.detect`: which of them a parsed file is.
"""

from __future__ import annotations

from loomterm.export.foreign.detect import (
    FOREIGN_FORMATS,
    is_tapestry,
    read_foreign,
    read_json_lines,
    read_text,
)
from loomterm.export.foreign.tapestry import TapestryError

__all__ = [
    "FOREIGN_FORMATS",
    "TapestryError",
    "is_tapestry",
    "read_foreign",
    "read_json_lines",
    "read_text",
]
