"""Undo and redo as navigation: every state is a place in the tree, and nothing is ever
deleted, so undoing an edit or a generation just goes back to where the document was.

A state may also carry text typed on top of its node that the engine has not seen yet
(a word end of typing on at the end of the text; an edit inside text the tree holds
is one state, so no undo ever makes a branch of its half-made text), and the change to
the tree's structure that led to it (a move, merge or split, ``tui.tidy_changes``):
undoing past that state reverts the change, redoing to it applies it again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from loomterm.tree import Node

LIMIT = 1000


@dataclass(frozen=True)
class Place:
    """A document state: the path's last node, the caret, unsynced text if any, and
    the structural change that made it (None for plain navigation)."""

    node: Node
    caret: int
    text: str | None = None
    change: Any = None


class History:
    """A linear undo stack with a redo branch that a new state cuts off."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._past: list[Place] = []
        self._future: list[Place] = []
        self.current: Place | None = None

    def push(self, place: Place) -> None:
        """Record ``place`` as the new present (the same node again is just updated)."""
        if self.current is not None:
            # The same node again, or the same text now held by another node (typing
            # synced after an undo lands in a new branch): the same state, updated,
            # and the redo kept.
            text = self.current.text
            same = self.current.node is place.node and text == place.text
            same = same or (text is not None and text == place.text)
            if same and place.change is None:
                self.current = replace(place, change=self.current.change)  # keep its change
                return
            self._past.append(self.current)
            del self._past[: max(0, len(self._past) - self.limit)]
        self.current = place
        self._future.clear()

    def undo(self) -> Place | None:
        """Step back; returns the place to show, or None at the oldest."""
        return self._step(self._past, self._future)

    def redo(self) -> Place | None:
        """Step forward again; returns the place to show, or None at the newest."""
        return self._step(self._future, self._past)

    def _step(self, source: list[Place], behind: list[Place]) -> Place | None:
        """Move to the last place of ``source``, the current one going onto ``behind``."""
        if not source or self.current is None:
            return None
        behind.append(self.current)
        self.current = source.pop()
        return self.current

    def save_unsynced(self, place: Place) -> None:
        """Undo of unsynced typing: ``place`` (with its text) becomes redoable."""
        self._future.append(place)

    @property
    def following(self) -> Place | None:
        """The place a redo would go to, if any."""
        return self._future[-1] if self._future else None

    def attach(self, change: Any) -> None:
        """Make the present place the result of ``change`` (undo reverts it)."""
        if self.current is not None:
            self.current = replace(self.current, change=change)

    @property
    def can_undo(self) -> bool:
        return bool(self._past)

    @property
    def can_redo(self) -> bool:
        return bool(self._future)
