"""The engine's change notices: who listens, and telling them.

Listeners are plain callables ``listener(event, node)``, told every
:class:`~loomterm.engine.events.Event` (what each means is said there). The session
layer records the file from them, the editor redraws from them; the engine never knows
who listens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomterm.engine.events import Event
    from loomterm.tree import Node

Listener = Callable[["Event", "Node | None"], None]
Emit = Listener  # the bus's ``emit`` as the Loom's parts are handed it: the same call


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

    def emit(self, event: Event, node: Node | None) -> None:
        if node is not None and self.hidden is not None and self.hidden(node):
            return
        # A copy: a listener may unsubscribe itself while being told.
        for listener in list(self._listeners):
            listener(event, node)
