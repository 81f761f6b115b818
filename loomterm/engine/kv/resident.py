"""How many bytes of KV are resident: on the nodes, in the working buffer, beside it (an
injected memory's own KV), and in all."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVBytes:
    """Resident KV bytes, each storage counted once.

    Attributes:
        nodes: Node KV stored apart from the working buffer.
        working: The working buffer (node KV that aliases it is counted here).
        context: The injected memory's KV kept beside the buffer
            (``ContextKV.nbytes``), so coming back to it computes nothing.
    """

    nodes: int = 0
    working: int = 0
    context: int = 0

    @property
    def total(self) -> int:
        return self.nodes + self.working + self.context

    def __add__(self, other: KVBytes) -> KVBytes:
        """Two runners' figures together (``Loom.kv_bytes`` over attached models)."""
        return KVBytes(
            self.nodes + other.nodes, self.working + other.working, self.context + other.context
        )
