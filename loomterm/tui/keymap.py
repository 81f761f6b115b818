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
from dataclasses import dataclass
from pathlib import Path

from textual.binding import Binding

from loomterm.locations import config_dir

KEYMAP_FILES = ("keymap.toml", "keymap.json")


@dataclass(frozen=True)
class Action:
    """One user-facing action.

    Attributes:
        id: Stable id, used by key maps.
        key: Default key(s), or "" for palette-only actions.
        action: The Textual action string run on the app.
        title: Short name (footer, palette).
        help: One sentence for the help screen, palette and tooltip.
        footer: Show in the footer.
        group: Heading on the help screen.
        short: Footer label (default: the title).
    """

    id: str
    key: str
    action: str
    title: str
    help: str
    footer: bool = False
    group: str = "Generate"
    short: str = ""

    def binding(self) -> Binding:
        return Binding(
            self.key,
            self.action,
            self.short or self.title,
            show=self.footer,
            id=self.id,
            tooltip=self.help,
            priority=self.id in PRIORITY,
        )


ACTIONS: tuple[Action, ...] = (
    # Generating
    Action(
        "generate",
        "ctrl+g",
        "generate",
        "Generate",
        "Continue from the caret, streaming; from the middle of the text this starts a new branch there.",
        True,
    ),
    Action(
        "regenerate",
        "ctrl+r",
        "regenerate",
        "Regenerate",
        "Generate a new sibling of the generated text the caret is in.",
        True,
        short="Regen",
    ),
    Action(
        "regenerate_own_context",
        "",
        "regenerate_own_context",
        "Regenerate with its own context",
        "A new sibling made with the memory, author's note and world info the node was made with.",
    ),
    Action(
        "generate_n",
        "ctrl+n",
        "siblings",
        "N siblings",
        "Generate N continuations at once from the caret (N is a setting); with several "
        "models attached, choose how many each one writes.",
        True,
        short="N×",
    ),
    Action(
        "next_model",
        "alt+l",
        "next_model",
        "Next model",
        "Make the next attached model the active one (several models in one tree).",
    ),
    Action(
        "attach_model",
        "",
        "attach_model",
        "Attach model",
        "Attach another model to this tree: a server URL or a local model folder or name "
        "with the same tokenizer.",
    ),
    Action(
        "blind_mode",
        "alt+w",
        "toggle_blind",
        "Blind mode",
        "Hide which model wrote siblings asked of several models until you pick one.",
    ),
    Action(
        "pick_branch",
        "alt+p",
        "pick_branch",
        "Pick this branch",
        "Pick the sibling the caret is in: in blind mode, reveal who wrote its group.",
    ),
    Action(
        "stop",
        "escape",
        "stop",
        "Stop",
        "Stop generating, or the model reading a long edit, keeping what has come.",
        True,
    ),
    Action(
        "weave",
        "alt+e",
        "weave",
        "Weave",
        "Grow the tree from the caret by itself: n children per node, d levels, the best k "
        "kept per level (a dialog asks); escape stops, keeping what it made.",
        False,
    ),
    Action(
        "alternatives",
        "ctrl+a",
        "alternatives",
        "Alternatives",
        "Show the top-10 alternatives of the token at the caret; picking one makes a branch.",
        False,
        short="Alts",
    ),
    Action(
        "refresh",
        "f8",
        "refresh_exact",
        "Recompute exactly",
        "Recompute the approximate (re-roped) tokens of this path exactly.",
    ),
    # Navigating
    Action(
        "prev_sibling",
        "alt+left",
        "sibling(-1)",
        "Prev sibling",
        "Show the previous sibling of the branch the caret is in.",
        True,
        "Navigate",
        short="◀ Sib",
    ),
    Action(
        "next_sibling",
        "alt+right",
        "sibling(1)",
        "Next sibling",
        "Show the next sibling of the branch the caret is in.",
        True,
        "Navigate",
        short="Sib ▶",
    ),
    Action(
        "parent_branch",
        "alt+up",
        "branch_point(-1)",
        "Parent branch",
        "Move the caret to the branch point above.",
        False,
        "Navigate",
    ),
    Action(
        "child_branch",
        "alt+down",
        "branch_point(1)",
        "Child branch",
        "Move the caret to the branch point below.",
        False,
        "Navigate",
    ),
    Action(
        "undo",
        "ctrl+z",
        "undo",
        "Undo",
        "Go back to the previous edit, generation or tree change (nothing is deleted).",
        True,
        "Navigate",
    ),
    Action("redo", "ctrl+y", "redo", "Redo", "Go forward again after an undo.", False, "Navigate"),
    Action(
        "branch_here",
        "alt+i",
        "branch_here",
        "Branch here",
        "The next keystroke starts a new branch, even in your own text (which typing"
        " otherwise changes in place); the old text stays as a sibling.",
        False,
        "Navigate",
    ),
    Action(
        "bookmark",
        "alt+s",
        "bookmark",
        "Bookmark",
        "Bookmark the branch the caret is in, or remove its bookmark.",
        False,
        "Navigate",
    ),
    Action(
        "next_bookmark",
        "alt+m",
        "next_bookmark",
        "Next bookmark",
        "Go to the next bookmarked branch.",
        False,
        "Navigate",
    ),
    Action(
        "hide_branch",
        "alt+h",
        "hide_branch",
        "Hide branch",
        "Hide (archive) the branch the caret is in, after confirmation; it can be shown again.",
        False,
        "Navigate",
    ),
    Action(
        "show_hidden",
        "",
        "toggle_hidden",
        "Show hidden branches",
        "Show or hide archived branches in the branch pane.",
        False,
        "Navigate",
    ),
    Action(
        "unhide_branch",
        "",
        "unhide_branch",
        "Unhide branch",
        "Bring the branch the caret is in back from the archive.",
        False,
        "Navigate",
    ),
    Action(
        "tree_map",
        "alt+o",
        "tree_map",
        "Tree map",
        "A map of the whole tree: the current path lit, bookmarks and new branches marked; "
        "arrows or h j k l move, enter goes there, escape closes.",
        False,
        "Navigate",
    ),
    Action(
        "hoist",
        "alt+z",
        "hoist",
        "Hoist",
        "Work inside the branch the caret is in as if it were the whole tree: the branch "
        "pane and the map show only it, the text above it is marked outside (kept).",
        False,
        "Navigate",
    ),
    Action(
        "unhoist",
        "alt+shift+z",
        "unhoist",
        "Unhoist",
        "Show the whole tree again after a hoist.",
        False,
        "Navigate",
    ),
    # Search, ratings and tidying the tree
    Action(
        "search",
        "ctrl+f",
        "search",
        "Search",
        "Search the text of every branch, plain or a regular expression; enter goes to a hit.",
        False,
        "Navigate",
    ),
    Action(
        "search_next",
        "alt+n",
        "search_step(1)",
        "Next hit",
        "Go to the next hit of the last search.",
        False,
        "Navigate",
    ),
    Action(
        "search_previous",
        "alt+shift+n",
        "search_step(-1)",
        "Previous hit",
        "Go to the previous hit of the last search.",
        False,
        "Navigate",
    ),
    Action(
        "rate_good",
        "alt+g",
        "rate(1)",
        "Rate good",
        "Mark the branch the caret is in as good (again: clear it); kept and exported.",
        False,
        "Tree",
    ),
    Action(
        "rate_bad",
        "alt+x",
        "rate(-1)",
        "Rate bad",
        "Mark the branch the caret is in as bad (again: clear it); kept and exported.",
        False,
        "Tree",
    ),
    Action(
        "rating_filter",
        "alt+r",
        "rating_filter",
        "Rating filter",
        "Branch pane: every branch, only good branches, or no bad ones (in turn).",
        False,
        "Tree",
    ),
    Action(
        "split_node",
        "alt+k",
        "split_node",
        "Split node",
        "Cut the node at the caret in two there (undoable).",
        False,
        "Tree",
    ),
    Action(
        "merge_node",
        "alt+j",
        "merge_node",
        "Merge into parent",
        "Merge the node at the caret into its parent, when it is the only child (undoable).",
        False,
        "Tree",
    ),
    Action(
        "pick_up_branch",
        "alt+c",
        "pick_up_branch",
        "Pick up branch",
        "Pick up the branch the caret is in, to move it (then Move branch here).",
        False,
        "Tree",
    ),
    Action(
        "move_branch_here",
        "alt+y",
        "move_branch_here",
        "Move branch here",
        "Hang the picked-up branch at the caret (undoable).",
        False,
        "Tree",
    ),
    # View
    Action(
        "toggle_tree",
        "ctrl+t",
        "toggle_tree",
        "Tree",
        "Show or hide the branch pane.",
        True,
        "View",
    ),
    Action(
        "tree_narrower",
        "alt+shift+left",
        "tree_width(-1)",
        "Narrower tree",
        "Make the branch pane narrower (remembered).",
        False,
        "View",
    ),
    Action(
        "tree_wider",
        "alt+shift+right",
        "tree_width(1)",
        "Wider tree",
        "Make the branch pane wider (remembered).",
        False,
        "View",
    ),
    Action(
        "focus_tree",
        "f4",
        "focus_tree",
        "Focus tree",
        "Move the keyboard to the branch pane (or back to the text).",
        False,
        "View",
    ),
    Action(
        "toggle_boundaries",
        "f5",
        "toggle_view('boundaries')",
        "Token boundaries",
        "Show where each token begins and ends.",
        False,
        "View",
    ),
    Action(
        "toggle_probs",
        "f6",
        "toggle_view('probabilities')",
        "Probability colours",
        "Colour each token by its probability (typed text too).",
        False,
        "View",
    ),
    Action(
        "toggle_surprisal",
        "f9",
        "toggle_view('surprisal')",
        "Surprisal view",
        "Colour the whole document by how unexpected each token was to the model (bits).",
        False,
        "View",
    ),
    Action(
        "toggle_approx",
        "f7",
        "toggle_view('approx')",
        "Approximate marks",
        "Mark re-roped (approximate) tokens until they are recomputed.",
        False,
        "View",
    ),
    Action(
        "theme", "", "change_theme", "Theme", "Pick a colour theme (remembered).", False, "View"
    ),
    Action(
        "context_view",
        "alt+v",
        "toggle_context_view",
        "Context view",
        "Show exactly what the model sees (memory, world info, author's note marked), or the document.",
        False,
        "View",
    ),
    # Session
    Action(
        "context",
        "f3",
        "context_dialog",
        "Memory and notes",
        "Edit memory, the author's note (and its depth) and world info, kept with the session.",
        False,
        "Session",
    ),
    Action(
        "settings",
        "f2",
        "settings",
        "Settings",
        "Sampling settings, N and the splice mode, kept with the session.",
        False,
        "Session",
    ),
    Action(
        "export",
        "ctrl+e",
        "export",
        "Export",
        "Export the session as Markdown, text, JSON or HTML.",
        True,
        "Session",
    ),
    Action(
        "sessions",
        "ctrl+o",
        "sessions",
        "Sessions",
        "Open, create, rename or delete sessions (with their model, size and last change).",
        False,
        "Session",
    ),
    Action(
        "save_elsewhere",
        "",
        "save_elsewhere",
        "Save session elsewhere",
        "Write the whole session to another name or path, which records it from then on "
        "(the way out when its file cannot be written: a full disk, a folder gone).",
        False,
        "Session",
    ),
    Action(
        "previous_session",
        "",
        "previous_session",
        "Back to previous session",
        "Go back to the session that was open before this one.",
        False,
        "Session",
    ),
    Action(
        "new_chat",
        "",
        "new_chat",
        "New chat",
        "Start a chat from a system and a user message, with the model's chat template.",
        False,
        "Session",
    ),
    Action(
        "add_turn",
        "alt+t",
        "add_turn",
        "Add chat turn",
        "Add a user turn (and the assistant's header) after the text.",
        False,
        "Session",
    ),
    Action("help", "f1", "help", "Help", "Every key and action.", True, "Session"),
    Action("quit", "ctrl+q", "quit", "Quit", "Save and quit.", True, "Session"),
)

# Bindings that must work whatever has focus (an Input in a dialog would eat them).
PRIORITY = frozenset({"quit"})

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
