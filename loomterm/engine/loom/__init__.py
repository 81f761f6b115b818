"""The Loom: the facade over the tree and its operations.

``facade`` holds :class:`Loom`; its mixins (``models``: several runners on one tree,
``context``: memory, author's note and world info, ``tidy``: split, merge, move) and the
parts it uses (``events``, ``edits``, ``registry``, ``weave``) sit beside it. ``Loom`` is
imported on first use, so that ``loomterm.engine.loom.events`` and the like load light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomterm.engine.loom.facade import Loom

__all__ = ["Loom"]


def __getattr__(name: str) -> Any:
    if name == "Loom":
        from loomterm.engine.loom.facade import Loom

        return Loom
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
