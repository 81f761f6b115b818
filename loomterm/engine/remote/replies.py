"""The shapes of server replies, checked where they come in.

A server is outside data: its JSON may hold any type anywhere. The dialects
(:mod:`loomterm.engine.remote.servers`) read every field through these helpers, so a
reply of the wrong shape is one :class:`MalformedReply` line naming what was wrong,
never a ``KeyError`` or ``TypeError`` from deep inside a dialect. Informational fields
(timings, model facts) of the wrong type are taken as absent; the fields a generation
needs (token ids, log-probabilities) are refused.
"""

from __future__ import annotations

import math
from typing import Any

from loomterm.errors import ServerError

MAX_TOKEN_ID = 2**31 - 1


class MalformedReply(ServerError):
    """A reply whose fields are not what the server's API promises."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "\u2026"


def table(value: Any) -> dict[str, Any]:
    """An optional object: ``{}`` when it is anything else."""
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    """An optional list: ``[]`` when it is anything else."""
    return value if isinstance(value, list) else []


def text(value: Any) -> str | None:
    """An optional text field: None when it is anything else (or empty)."""
    return value if isinstance(value, str) and value else None


def whole(value: Any) -> int | None:
    """An optional count (``"512"`` read as 512): None when it is no whole number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def number(value: Any) -> float | None:
    """An optional measurement (milliseconds, a rate): None when it is no finite number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def token_id(value: Any, url: str, what: str) -> int:
    """A token id the server reports; anything else is a :class:`MalformedReply`."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_ID:
        return value
    raise MalformedReply(
        f"the server at {url} sent a malformed {what}: {_shown(value)} is not a token id", url
    )


def logprob(value: Any, url: str, what: str) -> float:
    """A log-probability the server reports (at most about 0; -inf kept)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
        if value <= 1.0:
            return float(value)
    raise MalformedReply(
        f"the server at {url} sent a malformed {what}: {_shown(value)} is not a log-probability",
        url,
    )


def raw_bytes(value: Any, url: str, what: str) -> bytes:
    """A token's bytes, as text or a list of byte values."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if value is None:
        return b""
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b <= 255 for b in value):
        return bytes(value)
    raise MalformedReply(f"the server at {url} sent malformed token bytes in its {what}", url)


def reply_table(value: Any, url: str, what: str) -> dict[str, Any]:
    """A reply that must be an object."""
    if isinstance(value, dict):
        return value
    raise MalformedReply(f"the server at {url} sent a malformed {what}: not an object", url)
