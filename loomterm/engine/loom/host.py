"""What the Loom's request parts (generating and foresight) need of the Loom: the members
both read, all public. Each part's own protocol adds what only it needs; the facade
satisfies them all."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from loomterm.config.injection import ContextSpec
    from loomterm.config.settings import Settings
    from loomterm.engine.context import Assembly, ContextBook
    from loomterm.tree import Node, Tree


class RequestHost(Protocol):
    """The settings, the tree, the lock and the context a request is made and run with."""

    tree: Tree
    settings: Settings
    contexts: ContextBook

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def active_model(self) -> str: ...

    def check_node(self, node: Node) -> None: ...

    def assembly(self, version: str | None = None) -> Assembly: ...

    def context_spec(self, version: str | None = None) -> ContextSpec: ...
