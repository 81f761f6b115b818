"""The headless engine: models, KV caches, sampling and the Loom. No textual, no rich."""

from loomterm.engine.loom import Loom
from loomterm.tree import Node, Origin

__all__ = ["Loom", "Node", "Origin"]
