"""The headless engine: models, KV caches, sampling and the Loom. No textual, no rich.

``Loom`` is imported on first use, so that light modules (``engine.text``) can be
imported without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomterm.tree import Node, Origin

if TYPE_CHECKING:
    from loomterm.engine.loom.facade import Loom

__all__ = ["Loom", "Node", "Origin"]


def __getattr__(name: str) -> Any:
    if name == "Loom":
        from loomterm.engine.loom.facade import Loom

        return Loom
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
