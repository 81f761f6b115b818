"""The Loom's view of what the model sees: memory, author's note and world info.

Mixed into :class:`~loomterm.engine.loom.facade.Loom` (which holds ``settings``, ``contexts``,
the runner and the lock); the assembly itself is ``engine.context``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loomterm.config.injection import ContextSpec
from loomterm.engine.context import PATH, Assembled, Assembly, ContextBook, Piece

if TYPE_CHECKING:
    import threading

    from loomterm.config.settings import Settings
    from loomterm.engine.runner import Runner
    from loomterm.tree import Node


class LoomContext:
    """``context_tokens`` and its kin, for the Loom (see the module docstring)."""

    settings: Settings
    contexts: ContextBook
    runner: Runner
    models: dict[str, Runner]  # LoomModels': every attached runner
    n_ctx: int
    _lock: threading.RLock

    def check_node(self, node: Node) -> None:  # the Loom's
        raise NotImplementedError

    def _context_settings_changed(self) -> None:
        """After a settings change: a cleared memory frees the memory KV the local
        runners keep beside their buffers (``ContextKV.release_memory``), so the KV
        figures and the budget drop it too."""
        if self.settings.memory:
            return
        for runner in self.models.values():
            kept = getattr(getattr(runner, "cache", None), "context", None)
            if kept is not None:
                kept.release_memory()

    def _hold_moved(self, suffix: list[tuple[Node, int, int]], at: int) -> bool:
        """A fast splice under an injected context: the active local runner keeps the
        working buffer's columns of ``suffix`` to move them (re-rotated) to the new
        branch, which starts them at path position ``at`` (``ContextKV.hold``).
        False when there is nothing to hold (no injection, no RoPE, a server)."""
        kept = getattr(getattr(self.runner, "cache", None), "context", None)
        return kept is not None and kept.hold(suffix, at)

    def context_spec(self, version: str | None = None) -> ContextSpec:
        """The memory, author's note and world info of the settings (None) or of a
        recorded version ("" is none; ``InputError`` for an unknown one)."""
        return self.contexts.spec(ContextSpec.from_settings(self.settings), version)

    def context_version(self, node: Node) -> str:
        """The context version ``node`` was generated with ("" none, or typed text)."""
        return str(node.meta.get("context", ""))

    def assembly(self, version: str | None = None) -> Assembly:
        """What the model sees under the settings' context (None) or a recorded
        version: handed to a runner with each operation (``Runner.context``)."""
        return Assembly(self.contexts, self.context_spec(version), self.n_ctx)

    def context_layout(self, node: Node, version: str | None = None) -> Assembled:
        """What the model sees for ``node``'s path, as runs of path tokens and injected
        text (``engine.context.Assembled``: ``.tokens``, ``.pieces``, ``.injected()``).
        Without injection: the path, or the window of it the model sees."""
        with self._lock:
            self.check_node(node)
            spec = self.context_spec(version)
            made = self.contexts.assemble(node.path_tokens(), spec, self.n_ctx)
            if made is not None:
                return made
            runs = [(seg.node.start + seg.lo, seg.node.start + seg.hi) for seg in self.runner.window.layout(node)]  # fmt: skip
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
