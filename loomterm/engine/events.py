"""The engine's change notices, by name: what happened to the tree.

Listeners (the session's recorder, the editor) are told ``listener(event, node)``
(``loomterm.engine.loom.events.EventBus``); the engine never knows who listens. An
:class:`Event` is a ``str`` too, so a listener may compare it with its value.
"""

from __future__ import annotations

from enum import Enum


class Event(str, Enum):
    """One kind of change, with the node it concerns (or None)."""

    ADD = "add"
    """A new node."""
    TOKENS = "tokens"
    """A node grew during generation."""
    SPLIT = "split"
    """A node was cut in two; the head is passed."""
    MERGE = "merge"
    """A node took in its parent, which left the tree; the node is passed."""
    MOVE = "move"
    """A node and its subtree have a new parent."""
    REWRITE = "rewrite"
    """A node's tokens were replaced in place (the writer retyped their own text)."""
    UPDATE = "update"
    """A node's flags or meta changed."""
    RECORDS = "records"
    """Tokens already there got their log-probabilities and alternatives (a prefill)."""
    DONE = "done"
    """A generated node is complete."""
    CURSOR = "cursor"
    """The current node changed."""
    SETTINGS = "settings"
    """The session's settings changed (no node)."""
    MODELS = "models"
    """The session's model table or model state changed (no node)."""
    CONTEXTS = "contexts"
    """A context version was recorded (``loom.contexts.versions``; no node)."""

    def __str__(self) -> str:
        return self.value
