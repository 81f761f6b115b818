"""What the path cache and the context KV read of the local runner, as a protocol.

``PathCache`` and ``ContextKV`` keep the working cache in step with the tree for
:class:`~loomterm.engine.local.runner.LocalRunner`. They are typed against
:class:`LocalHost`, the runner's attributes they read, rather than the runner itself,
so the runner sits above them with no import back.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from loomterm.engine.context import Assembled
    from loomterm.engine.decode.job import Forward
    from loomterm.engine.events import Event
    from loomterm.engine.kv.cache import WorkingCache
    from loomterm.engine.kv.rope import RopeSpec
    from loomterm.engine.kv.window import Window
    from loomterm.engine.runner import Progress
    from loomterm.tree import Node


class LocalHost(Protocol):
    """The local runner as its KV bookkeeping sees it."""

    work: WorkingCache
    window: Window
    device: torch.device
    rope: RopeSpec | None
    keep_records: bool  # typed tokens get records from their prefill
    rerotate_window: bool  # past n_ctx, re-rotate a held window rather than recompute
    progress: Progress | None
    interrupt: threading.Event | None

    def emit(self, event: Event, node: Node | None) -> None: ...

    forward: Forward  # the model over the working cache (``LocalRunner.forward``)

    def touch(self, nodes: list[Node]) -> None: ...

    def enforce_budget(self, protect: list[Node]) -> int: ...

    def context_for(
        self, node: Node, reserve: int = 0, world_info: list[tuple[int, ...]] | None = None
    ) -> Assembled | None: ...
