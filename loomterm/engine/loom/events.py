"""The engine's change notices: who listens, and telling them.

Listeners are plain callables ``listener(event, node)``. Events: ``add`` (a new node),
``tokens`` (a node grew during generation), ``split`` (a node was cut in two; the
head is passed), ``merge`` (a node took in its parent, which left the tree; the node
is passed), ``move`` (a node and its subtree have a new parent), ``rewrite`` (a node's
tokens were replaced in place: the writer retyped their own text, ``Loom.retype``),
``update`` (flags or meta changed), ``records`` (tokens already there got their
log-probabilities and alternatives, from a prefill), ``done`` (a generated node is
complete), ``cursor``, ``settings`` and ``contexts`` (a context version was recorded,
``loom.contexts.versions``). The session layer records the file from them,
the editor redraws from them; the engine never knows who listens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomterm.tree import Node

Listener = Callable[[str, "Node | None"], None]


class EventBus:
    """A list of listeners, called in the order they subscribed."""

    def __init__(self, hidden: Callable[[Node], bool] | None = None) -> None:
        self._listeners: list[Listener] = []
        # Nodes nobody is told about: written ahead, out of sight (``foresight``).
        self.hidden = hidden

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event: str, node: Node | None) -> None:
        if node is not None and self.hidden is not None and self.hidden(node):
            return
        # A copy: a listener may unsubscribe itself while being told.
        for listener in list(self._listeners):
            listener(event, node)
