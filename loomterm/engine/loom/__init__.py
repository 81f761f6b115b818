"""The Loom: the facade over the tree and its operations.

``facade`` holds :class:`Loom`, which holds its parts and delegates to them
(``editing``: truncate, splice, edit, retype; ``generating``: generate and run;
``foresight``; ``models``: several runners on one tree; ``context``: memory, author's
note and world info; ``tidy``: split, merge, move); what they use (``events``,
``edits``, ``registry``, ``healing``) and ``weave``, over the Loom, sit beside it. ``Loom`` is
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
