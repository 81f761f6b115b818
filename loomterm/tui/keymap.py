"""Every app-level action, its default key, and the user's key map.

One table (:data:`ACTIONS`) feeds the app's ``BINDINGS`` (each with an ``id`` so it can be
remapped), the help screen and the command palette, so they never disagree.

Users remap keys in ``keymap.toml`` (or ``keymap.json``) in the config folder, by action
id, with Textual's key names; a comma gives several keys::

    # ~/.config/loomterm/keymap.toml
    generate = "ctrl+g,f9"
    alternatives = "alt+a"

A ``[keys]`` table is read the same way. Unknown ids and unreadable files are reported,
never fatal. Reading the file is headless: ``loomterm.config.keymap``.

Terminals send alt+b and alt+f as ESC b / ESC f, which Textual reads as ctrl+left and
ctrl+right (word moves), so no default uses them.
"""

from __future__ import annotations

from textual.binding import Binding

from loomterm.tui.action import PRIORITY, Action
from loomterm.tui.actions_tree_and_view import TREE_AND_VIEW
from loomterm.tui.actions_writing import WRITING

__all__ = ["ACTIONS", "ACTION_BY_ID", "PRIORITY", "Action", "app_bindings"]

# Every action, in the order the help screen and the palette list them.
ACTIONS: tuple[Action, ...] = WRITING + TREE_AND_VIEW

ACTION_BY_ID = {action.id: action for action in ACTIONS}


def app_bindings() -> list[Binding]:
    """The app's bindings, from :data:`ACTIONS`."""
    return [action.binding() for action in ACTIONS if action.key]
