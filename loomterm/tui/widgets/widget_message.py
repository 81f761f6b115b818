"""The base of the messages a widget sends about itself (Textual's convention: the
widget is the message's ``control``, so ``@on(Message, "#id")`` selects by it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from textual.message import Message
from textual.widget import Widget

W = TypeVar("W", bound=Widget)


@dataclass
class WidgetMessage(Message, Generic[W]):
    """A message from ``widget``, about ``widget``."""

    widget: W

    @property
    def control(self) -> W:
        """The widget that sent the message."""
        return self.widget
