"""What a node's fields may hold, checked where outside data comes in: a session file's
rows (:mod:`loomterm.store.reader`) and an imported tree (:mod:`loomterm.export`).

Everything downstream (the editor, the exporters, the engine) takes these types for
granted, so a value of the wrong shape is refused here, once, with one line that names
the field, instead of failing later as a traceback far from its cause.

Standard library only.
"""

from __future__ import annotations

import math
from typing import Any

from loomterm.tree import Origin

# Token ids are stored as int32 in the alternatives blob (``encoding.pack_top``) and as
# SQLite integers; no tokenizer comes near this many.
MAX_TOKEN_ID = 2**31 - 1
# SQLite's INTEGER is a signed 64-bit number (a seed, an id).
MAX_INTEGER = 2**63 - 1
# A log-probability is at most 0; a little above it is rounding, far above it is garbage
# (``exp`` of it overflows where the editor shows a probability).
MAX_LOGPROB = 1.0

ORIGINS = frozenset(origin.value for origin in Origin)


class FieldError(ValueError):
    """A field that holds the wrong kind of value; the message names the field."""


def _shown(value: Any) -> str:
    """``value`` for a one-line message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "\u2026"


def is_whole(value: Any) -> bool:
    """A whole number (``True`` is not one, though Python says it is an ``int``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def token_id(value: Any, field: str) -> int:
    """A token id: a whole number from 0 to :data:`MAX_TOKEN_ID` (``1.0`` and ``1e999``
    are not; a float would be rounded silently into another token)."""
    if not is_whole(value) or not 0 <= value <= MAX_TOKEN_ID:
        raise FieldError(f"{field} must be a token id (0 to {MAX_TOKEN_ID}), not {_shown(value)}")
    return value


def node_id(value: Any, field: str) -> int:
    """A node id: a whole number from 0 up (an SQLite integer)."""
    if not is_whole(value) or not 0 <= value <= MAX_INTEGER:
        raise FieldError(f"{field} must be a node id (a whole number from 0), not {_shown(value)}")
    return value


def seed(value: Any, field: str) -> int | None:
    """A seed, or None."""
    if value is not None and (not is_whole(value) or abs(value) > MAX_INTEGER):
        raise FieldError(f"{field} must be a whole number or null, not {_shown(value)}")
    return value


def moment(value: Any, field: str) -> float:
    """A time in seconds since the epoch: a finite number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise FieldError(f"{field} must be a time in seconds, not {_shown(value)}")
    return float(value)


def logprob(value: Any, field: str) -> float | None:
    """A log-probability (at most about 0; minus infinity and NaN kept), or None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = float(value)
        if math.isnan(value) or value <= MAX_LOGPROB:
            return value
    raise FieldError(f"{field} must be a log-probability (at most 0) or null, not {_shown(value)}")


def origin(value: Any, field: str) -> Origin:
    """Who wrote a node: one of :class:`~loomterm.tree.Origin`'s values."""
    if not isinstance(value, str) or value not in ORIGINS:
        raise FieldError(
            f"{field} must be one of {', '.join(sorted(ORIGINS))}, not {_shown(value)}"
        )
    return Origin(value)


def table(value: Any, field: str) -> dict[str, Any]:
    """A JSON object with text keys (settings, a model record, meta)."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise FieldError(f"{field} must be an object, not {_shown(value)}")
    return value


def sampling(value: Any, field: str) -> dict[str, Any] | None:
    """The sampling settings a node was made with, or None."""
    return None if value is None else table(value, field)


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _flag(value: Any) -> bool:
    return value is None or isinstance(value, bool)


def _mark(value: Any) -> bool:  # a bookmark: set or not, or its label
    return value is None or isinstance(value, (bool, str))


def _key(value: Any) -> bool:  # an id (group, run, context version): compared and hashed
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


def _rating(value: Any) -> bool:  # 0 or null: unrated (``tree.rating_of``)
    return value is None or (is_whole(value) and value in (1, 0, -1))


def _tags(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(tag, str) for tag in value)


def _runs(value: Any) -> bool:  # ``tree.MERGED_ORIGINS``: [[count, origin], ...]
    return isinstance(value, list) and all(
        isinstance(run, list)
        and len(run) == 2
        and is_whole(run[0])
        and run[0] >= 0
        and run[1] in ORIGINS
        for run in value
    )


# The meta keys loomterm itself reads, and what each must hold. Other keys are the
# user's (or another tool's) and are kept as they are.
META_KEYS = {
    "role": (_text, "text or null"),
    "model": (_text, "a model key or null"),
    "context": (_key, "a context id or null"),
    "weave": (_key, "a weave run id or null"),
    "blind": (_key, "a group id or null"),
    "bookmark": (_mark, "true, false or a label"),
    "hidden": (_flag, "true, false or null"),
    "picked": (_flag, "true, false or null"),
    "rating": (_rating, "1, -1, 0 or null"),
    "tags": (_tags, "a list of text"),
    "merged_origins": (_runs, "a list of [count, origin] pairs"),
}


def meta(value: Any, field: str) -> dict[str, Any]:
    """A node's meta: an object whose keys loomterm reads hold what it expects."""
    table(value, field)
    for key, (fits, wanted) in META_KEYS.items():
        if key in value and not fits(value[key]):
            raise FieldError(f"{field}.{key} must be {wanted}, not {_shown(value[key])}")
    return value
