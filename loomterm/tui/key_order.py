"""Keys applied in the order they were typed, whatever runs them.

Textual (8.x) hands each key to the focused widget's message queue. A widget handles
printable characters there, but a key that is a *binding* (backspace, the arrows,
ctrl+s, escape, even the widget's own) runs only once it has bubbled up to the app
through the queue of every container above, while the characters typed after it are
already being inserted: "ab", backspace, "c" typed at speed can give "ba" (Textual's
issue 6605). The editor's document and every text field of a dialog therefore run a
key's binding at once, where the key arrived, looked up in the bindings that are active
now (the widget's own, its containers', the screen's and the app's, after the user's
key map): :func:`bindings_now` and :func:`run_at_once`.

A key that moves the focus must take effect before the app hands on the next key, or
that key goes to the field that had the focus: the editor's screen and every dialog
bind tab and shift+tab as priority bindings (:data:`FOCUS_BINDINGS`), which the app
runs in its own turn. A key that reaches a field after its dialog has closed (typed
right after the enter that closed it) goes on to what has the focus now:
:func:`hand_on`.
"""

from __future__ import annotations

import unicodedata
import weakref
from functools import cache
from typing import TYPE_CHECKING

from textual import events
from textual.actions import parse as parse_action
from textual.binding import Binding, BindingsMap
from textual.dom import DOMNode, NoScreen
from textual.keys import ASCII_KEY_NAMES, KEY_NAME_REPLACEMENTS
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.app import App
    from textual.widget import Widget

FOCUS_BINDINGS = [
    Binding("tab", "app.focus_next", "Next", show=False, priority=True),
    Binding("shift+tab", "app.focus_previous", "Previous", show=False, priority=True),
]
"""Tab and shift+tab, run by the app as it reads them (Textual's are the screen's, run
once the key has bubbled up to it)."""

# A key with one of these is a binding, even when the terminal sends it as a character.
MODIFIER_PREFIXES = ("alt+", "ctrl+", "super+", "meta+", "hyper+")


def is_text(event: events.Key) -> bool:
    """True for a key that types its character (not alt+s, which a terminal sends as
    ESC s: a printable character, but a key for a binding)."""
    return (
        event.is_printable
        and event.character is not None
        and not event.key.startswith(MODIFIER_PREFIXES)
    )


# The user's key map of each app, as given to ``App.set_keymap`` (Textual keeps its own
# copy out of reach): applied here to the bindings of each node.
_KEYMAPS: weakref.WeakKeyDictionary[App, dict[str, str]] = weakref.WeakKeyDictionary()


def set_keymap(app: App, keymap: dict[str, str]) -> None:
    """Apply ``keymap`` (binding id to keys) to ``app``, for Textual and for
    :func:`bindings_now` alike."""
    _KEYMAPS[app] = {
        binding_id: ",".join(_key_name(key.strip()) for key in keys.split(","))
        for binding_id, keys in keymap.items()
    }
    app.set_keymap(keymap)


def _key_name(key: str) -> str:
    """A key as Textual names it in a key map ("?" is "question_mark"), as
    ``App.set_keymap`` normalises it."""
    if len(key) != 1 or key.isalnum():
        return key
    try:
        name = unicodedata.name(key).lower().replace("-", "_").replace(" ", "_")
    except ValueError:
        name = ASCII_KEY_NAMES.get(key, key)
    return KEY_NAME_REPLACEMENTS.get(name, name)


@cache
def class_bindings(node_class: type[DOMNode]) -> BindingsMap:
    """The bindings of a node class: the ``BINDINGS`` of each class of its MRO, later
    classes' keys replacing earlier ones', as Textual merges them."""
    maps: list[BindingsMap] = []
    for base in reversed(node_class.__mro__):
        if issubclass(base, DOMNode):
            if base is Static:  # declared with inherit_bindings=False: starts afresh
                maps.clear()
            maps.append(BindingsMap(base.__dict__.get("BINDINGS", [])))
    keys: dict[str, list[Binding]] = {}
    for bindings in maps:
        keys.update(bindings.key_to_bindings)
    return BindingsMap.from_keys(keys)


def node_bindings(node: DOMNode) -> BindingsMap:
    """A fresh copy of ``node``'s bindings: its class's, and for an app with the
    command palette the palette's priority binding Textual's ``App`` adds to them."""
    bindings = class_bindings(type(node)).copy()
    if getattr(node, "ENABLE_COMMAND_PALETTE", False):
        palette = ("command_palette", "app.command_palette")
        if not any(binding.action in palette for _key, binding in bindings):
            bindings = BindingsMap.merge(
                [
                    bindings,
                    BindingsMap(
                        [Binding(node.COMMAND_PALETTE_BINDING, "command_palette", priority=True)]
                    ),
                ]
            )
    return bindings


def action_on(node: DOMNode, action: str) -> bool | None:
    """Whether ``action`` (as a binding of ``node`` names it) is on: its target's
    ``check_action``, the target found as Textual's app finds it (no namespace: the
    node; "app", "screen" or "focused": that one)."""
    app = node.app
    namespace, name, parameters = parse_action(action)
    if not namespace:
        target: DOMNode | None = node
    elif namespace in ("app", "screen", "focused"):
        target = getattr(app, namespace, None)
    else:
        return False  # a namespace Textual would refuse: never runs
    if target is None:
        return False
    return target.check_action(name, parameters)


def bindings_now(widget: Widget, key: str) -> list[tuple[DOMNode, str]]:
    """The actions ``key`` may run for ``widget`` here and now, and where, in the order
    Textual's app tries them once the key has bubbled up to it: the widget's bindings,
    then its containers', its screen's (and the app's, outside a dialog), as the user's
    key map left them, those whose action is on. The first that does not skip itself
    runs (an Input's scroll_down skips, and the dialog's own down runs). Empty when
    unbound, or when it is a priority binding (the app ran it before the key got here).

    The widget may have lost the focus meanwhile (a tab the app ran as it read it, with
    keys typed before it still on their way here): its keys are still its own, so the
    chain is walked from the widget, not from the focus, as Textual's ``Screen`` walks
    it (the bindings of each node's class, the key map, each action's check)."""
    keymap = _KEYMAPS.get(widget.app)
    found: list[tuple[DOMNode, str]] = []
    for node in widget.ancestors_with_self:  # up to the screen, then the app
        bindings = node_bindings(node)
        if keymap:
            bindings.apply_keymap(keymap)
        for binding in bindings.key_to_bindings.get(key, ()):
            if binding.priority:
                return []
            if action_on(node, binding.action):  # False or None: off
                found.append((node, binding.action))
        if node.is_modal:
            break  # a dialog's keys stop at its screen, as Textual's do
    return found


async def run_bound(widget: Widget, found: list[tuple[DOMNode, str]]) -> bool:
    """Run the first of ``found`` (from :func:`bindings_now`) that does not skip
    itself; True when one ran."""
    for node, action in found:
        if await widget.app.run_action(action, node):
            return True
    return False


async def run_at_once(widget: Widget, event: events.Key) -> bool:
    """Run the binding ``event`` has for ``widget`` now, in ``widget``'s turn; True
    when it is bound (the event is then stopped and its default handling prevented)."""
    found = bindings_now(widget, event.key)
    if not found:
        return False
    event.stop()
    event.prevent_default()
    await run_bound(widget, found)
    return True


def hand_on(widget: Widget, event: events.Key | events.Paste) -> bool:
    """When ``widget``'s screen is no longer the active one (its dialog closed while
    this input was on its way), give the input to what has the focus now, and say
    True; else False."""
    app = widget.app
    try:
        if widget.screen is app.screen:
            return False
    except NoScreen:
        pass  # the dialog is gone already
    event.stop()
    event.prevent_default()
    target = app.focused or app.screen
    if isinstance(event, events.Key):
        target.post_message(events.Key(event.key, event.character))
    else:
        target.post_message(events.Paste(event.text))
    return True
