"""Every app-level action, its default key, and the user's key map.

One table (:data:`ACTIONS`) feeds the app's ``BINDINGS`` (each with an ``id`` so it can be
remapped), the help screen and the command palette, so they never disagree.

Users remap keys in ``keymap.toml`` (or ``keymap.json``) in the config folder, by action
id, with Textual's key names; a comma gives several keys::

    # ~/.config/loomterm/keymap.toml
    generate = "ctrl+g,f9"
    alternatives = "alt+a"

A ``[keys]`` table is read the same way. Unknown ids and unreadable files are reported,
never fatal.

Terminals send alt+b and alt+f as ESC b / ESC f, which Textual reads as ctrl+left and
ctrl+right (word moves), so no default uses them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from textual.binding import Binding

from loomterm.locations import config_dir
from loomterm.tui.action import PRIORITY, Action
from loomterm.tui.actions_tree_and_view import TREE_AND_VIEW
from loomterm.tui.actions_writing import WRITING

__all__ = [
    "ACTIONS",
    "ACTION_BY_ID",
    "KEYMAP_FILES",
    "PRIORITY",
    "Action",
    "KeymapError",
    "app_bindings",
    "keymap_path",
    "load_keymap",
    "unknown_ids",
]

KEYMAP_FILES = ("keymap.toml", "keymap.json")


# Every action, in the order the help screen and the palette list them.
ACTIONS: tuple[Action, ...] = WRITING + TREE_AND_VIEW

ACTION_BY_ID = {action.id: action for action in ACTIONS}


def app_bindings() -> list[Binding]:
    """The app's bindings, from :data:`ACTIONS`."""
    return [action.binding() for action in ACTIONS if action.key]


class KeymapError(ValueError):
    """A key map file that cannot be used (the message names the file and the reason)."""


def keymap_path() -> Path | None:
    """The user's key map file, if there is one."""
    for name in KEYMAP_FILES:
        path = config_dir() / name
        if path.is_file():
            return path
    return None


def load_keymap(path: Path | None = None) -> dict[str, str]:
    """The user's key map: ``{binding id: keys}``. Empty when there is no file.

    Raises:
        KeymapError: the file cannot be read or holds something other than strings.
    """
    path = path or keymap_path()
    if path is None:
        return {}
    try:
        raw = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(raw)
        else:
            data = _toml_loads(raw)
    except (OSError, ValueError) as exc:
        raise KeymapError(f"key map {path} not used: {exc}") from None
    except RecursionError:
        raise KeymapError(f"key map {path} not used: nested too deeply") from None
    if not isinstance(data, dict):
        raise KeymapError(f"key map {path} not used: it must hold a table of id = keys")
    if isinstance(data.get("keys"), dict):
        data = {**{k: v for k, v in data.items() if k != "keys"}, **data["keys"]}
    bad = [key for key, value in data.items() if not _keys_text(value)]
    if bad:
        shown = repr(str(bad[0]))[:40]
        raise KeymapError(
            f'key map {path} not used: {shown} must be keys such as "ctrl+g" or "f5,alt+g"'
        )
    return {str(key): value for key, value in data.items()}


# One key as Textual names it ("ctrl+g", "f5", "question_mark", "A"): no spaces, no
# empty part between '+' signs.
_KEY = re.compile(r"[^\s+,]+(\+[^\s+,]+)*|\+")


def _keys_text(value: object) -> bool:
    """A key map value: one key or several, comma-separated."""
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        return False
    return all(_KEY.fullmatch(part.strip()) for part in value.split(","))


def unknown_ids(keymap: dict[str, str], known: set[str]) -> list[str]:
    """Ids in ``keymap`` that no binding has (probably typos)."""
    return sorted(set(keymap) - known)


def _toml_loads(text: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ValueError("reading TOML needs Python 3.11 or tomli; use keymap.json") from None
    return tomllib.loads(text)
