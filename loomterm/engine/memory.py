"""How much KV memory is resident: on the nodes, in the working buffer, and in all."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVMemory:
    """Resident KV bytes, each storage counted once.

    Attributes:
        nodes: Node KV stored apart from the working buffer.
        working: The working buffer (node KV that aliases it is counted here).
    """

    nodes: int = 0
    working: int = 0

    @property
    def total(self) -> int:
        return self.nodes + self.working
