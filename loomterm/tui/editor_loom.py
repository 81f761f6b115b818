"""What the editor uses of a Loom at any moment, its model loaded or not
(:class:`EditorLoom`).

The editor opens on a stand-in (``loomterm.sessions.opening.PreviewLoom``: the session
file's tree, no model) and the real :class:`~loomterm.engine.Loom` takes its place once
the model is loaded (``loomterm.tui.model_loading``). Both implement this protocol, so
the app holds either as ``EditorLoom``; ``tests/tui/test_editor_loom.py`` checks that
each has every member with a compatible signature. Work that needs the model itself
(generating, editing the tree) is held until the real Loom is there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from loomterm.config.settings import Settings
    from loomterm.tree import Node, Tree


class EditorLoom(Protocol):
    """The Loom as the editor sees it: the tree and where the user stands, the
    settings, the text of tokens, the models, its events and progress."""

    tree: Tree
    settings: Settings
    progress: Callable[[str, int, int | None], None] | None
    """Prefill and loading progress, to the status bar (None: unheard)."""
    interrupt: threading.Event | None
    """Set to stop a long prefill between two chunks."""

    @property
    def root(self) -> Node: ...
    @property
    def cursor(self) -> Node: ...
    @cursor.setter
    def cursor(self, node: Node) -> None: ...
    @property
    def codec(self) -> Any: ...
    @property
    def runner(self) -> Any: ...
    @property
    def models(self) -> dict[str, Any]: ...
    @property
    def model_table(self) -> dict[str, dict[str, Any]]: ...
    @property
    def active_model(self) -> str: ...
    @property
    def model_notes(self) -> dict[str, str]: ...
    def kv_bytes(self) -> Any: ...
    def decode(self, tokens: list[int]) -> str: ...
    def text(self, node: Node) -> str: ...
    def tokens(self, node: Node) -> list[int]: ...
    def subscribe(self, listener: Callable[..., None]) -> None: ...
    def unsubscribe(self, listener: Callable[..., None]) -> None: ...
    def exclusive(self) -> AbstractContextManager[None]: ...


__all__ = ["EditorLoom"]
