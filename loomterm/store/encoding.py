"""How values are packed into a session's columns: token ids, alternatives, JSON.

Standard library only; nothing here touches a file.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from enum import Enum
from typing import Any

from loomterm.tree import Alternative


def pack_tokens(tokens: Iterable[int]) -> bytes:
    """Token ids as little-endian uint32 (used by the KV snapshot's path hash)."""
    items = list(tokens)
    return struct.pack(f"<{len(items)}I", *items)


def pack_top(top: list[Alternative] | None) -> bytes | None:
    """Alternatives as one blob: ``k`` int32 token ids, then ``k`` float64 logprobs.

    Exact for every id below 2**31 and every float, and about a tenth the size of JSON.
    ``None`` (never measured) stays NULL; an empty list is an empty blob.
    """
    if top is None:
        return None
    ids = [int(t) for t, _ in top]
    lps = [float(lp) for _, lp in top]
    return struct.pack(f"<{len(ids)}i{len(lps)}d", *ids, *lps)


def unpack_top(blob: bytes | None) -> list[Alternative] | None:
    """Inverse of :func:`pack_top`."""
    if blob is None:
        return None
    k = len(blob) // 12
    if k * 12 != len(blob):
        raise ValueError("alternatives blob has a partial entry")
    values = struct.unpack(f"<{k}i{k}d", blob)
    return list(zip(values[:k], values[k:], strict=True))


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a session")


def to_json(value: Any) -> str:
    """JSON text for a settings, sampling or meta value."""
    return json.dumps(value, ensure_ascii=False, default=_json_default)
