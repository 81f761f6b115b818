"""The Loom's view of what the model sees: memory, author's note and world info.

A part the :class:`~loomterm.engine.loom.facade.Loom` holds and delegates to; it owns
the context book (``contexts``) and reaches the Loom only through the public
:class:`ContextHost` (settings, runners, lock). The assembly itself is ``engine.context``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from loomterm.config.injection import ContextSpec
from loomterm.engine.context import PATH, Assembled, Assembly, ContextBook, Piece

if TYPE_CHECKING:
    from loomterm.config.settings import Settings
    from loomterm.engine.runner import Runner
    from loomterm.tree import Node


class ContextHost(Protocol):
    """What the context part needs of the Loom: all of it public."""

    settings: Settings

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def runner(self) -> Runner: ...

    @property
    def models(self) -> dict[str, Runner]: ...

    @property
    def n_ctx(self) -> int: ...

    def check_node(self, node: Node) -> None: ...


class LoomContext:
    """``context_tokens`` and its kin, for the Loom (see the module docstring).

    Attributes:
        contexts: The context versions nodes were generated with (``ContextBook``).
    """

    def __init__(self, loom: ContextHost, contexts: ContextBook) -> None:
        self.loom = loom
        self.contexts = contexts

    def settings_changed(self) -> None:
        """After a settings change: a cleared memory frees the memory KV the local
        runners keep beside their buffers (``ContextKV.release_memory``), so the KV
        figures and the budget drop it too."""
        if self.loom.settings.memory:
            return
        for runner in self.loom.models.values():
            kept = getattr(getattr(runner, "cache", None), "context", None)
            if kept is not None:
                kept.release_memory()

    def hold_moved(self, suffix: list[tuple[Node, int, int]], at: int) -> bool:
        """A fast splice under an injected context: the active local runner keeps the
        working buffer's columns of ``suffix`` to move them (re-rotated) to the new
        branch, which starts them at path position ``at`` (``ContextKV.hold``).
        False when there is nothing to hold (no injection, no RoPE, a server)."""
        kept = getattr(getattr(self.loom.runner, "cache", None), "context", None)
        return kept is not None and kept.hold(suffix, at)

    def context_spec(self, version: str | None = None) -> ContextSpec:
        """The memory, author's note and world info of the settings (None) or of a
        recorded version ("" is none; ``InputError`` for an unknown one)."""
        return self.contexts.spec(ContextSpec.from_settings(self.loom.settings), version)

    def context_version(self, node: Node) -> str:
        """The context version ``node`` was generated with ("" none, or typed text)."""
        return str(node.meta.get("context", ""))

    def assembly(self, version: str | None = None) -> Assembly:
        """What the model sees under the settings' context (None) or a recorded
        version: handed to a runner with each operation (``Runner.context``)."""
        return Assembly(self.contexts, self.context_spec(version), self.loom.n_ctx)

    def context_layout(self, node: Node, version: str | None = None) -> Assembled:
        """What the model sees for ``node``'s path, as runs of path tokens and injected
        text (``engine.context.Assembled``: ``.tokens``, ``.pieces``, ``.injected()``).
        Without injection: the path, or the window of it the model sees."""
        loom = self.loom
        with loom.lock:
            loom.check_node(node)
            spec = self.context_spec(version)
            made = self.contexts.assemble(node.path_tokens(), spec, loom.n_ctx)
            if made is not None:
                return made
            runs = [(seg.node.start + seg.lo, seg.node.start + seg.hi) for seg in loom.runner.window.layout(node)]  # fmt: skip
            pieces, path = [], node.path_tokens()
            for lo, hi in runs:
                if pieces and pieces[-1].hi == lo:
                    lo = pieces.pop().lo
                pieces.append(Piece(PATH, lo, hi))
            tokens = [t for p in pieces for t in path[p.lo : p.hi]]
            return Assembled(tokens, pieces, spec.version, plain=len(tokens))

    def context_tokens(self, node: Node, version: str | None = None) -> list[int]:
        """The exact token ids the model sees for ``node``'s path: memory, triggered
        world info, the path with the author's note inside (``engine.context``)."""
        return self.context_layout(node, version).tokens
