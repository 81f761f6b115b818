"""The editor's own preferences (theme, view toggles), kept in ``<config>/tui.json``.

Sampling settings belong to a session and live in its file; these belong to the user.
A damaged file is ignored (and rewritten on the next change), never fatal.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from loomterm.atomic import write_atomic
from loomterm.config.locations import config_dir

PREFS_FILE = "tui.json"


@dataclass
class Prefs:
    """What the user chose last time.

    Attributes:
        theme: Theme name.
        tree: Branch pane shown.
        boundaries: Token boundaries shown.
        probabilities: Tokens coloured by probability.
        surprisal: Tokens coloured by surprisal (bits).
        approx: Approximate (re-roped) tokens marked.
        show_hidden: Archived branches shown in the branch pane.
        tree_share: The branch pane's share of the terminal's width.
    """

    theme: str = "loom-dark"
    tree: bool = True
    boundaries: bool = False
    probabilities: bool = False
    surprisal: bool = False
    approx: bool = True
    show_hidden: bool = False
    tree_share: float = 0.34


def prefs_path() -> Path:
    return config_dir() / PREFS_FILE


def load_prefs() -> Prefs:
    try:
        data = json.loads(prefs_path().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return Prefs()
    if not isinstance(data, dict):
        return Prefs()
    known = {field.name: field.type for field in fields(Prefs)}
    defaults = Prefs()
    values = {}
    for key, value in data.items():
        if key in known and isinstance(value, type(getattr(defaults, key))):
            if isinstance(value, float) and not 0.0 <= value <= 1.0:  # a share; NaN fails too
                continue
            values[key] = value
    return Prefs(**values)


def save_prefs(prefs: Prefs) -> None:
    """Write ``prefs`` (atomically; a failure to write is not worth an error)."""
    try:
        write_atomic(prefs_path(), json.dumps(asdict(prefs), indent=2) + "\n")
    except OSError:
        pass
