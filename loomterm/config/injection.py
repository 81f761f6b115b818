"""What the model sees besides the document: memory, author's note and world info.

The shapes only, in the standard library, so the settings, the session file, the
export and the engine share them:

- :func:`check_world_info` validates the ``world_info`` setting, a table
  ``{"scan_depth": 64, "entries": [{"keys": ["Ada", "the tower"], "text": "..."}]}``
  (a bare list of entries is read as ``entries``; ``keys`` may be one comma-separated
  string). An entry joins the context when one of its keys appears, ignoring case, in
  the last ``scan_depth`` tokens of the path.
- :class:`ContextSpec` is one version of the four settings together, with a content id
  (:attr:`ContextSpec.version`): the same text always gets the same id, so a node can
  record the context it was generated with by that id alone.
- :class:`ContextVersions` keeps every version a node recorded, for the session file.

How the engine assembles the tokens is ``loomterm.engine.context``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SCAN_DEPTH = 64
MAX_SCAN_DEPTH = 100_000


def check_world_info(value: Any) -> dict[str, Any]:
    """The ``world_info`` setting, normalized to ``{"scan_depth", "entries"}`` with each
    entry ``{"keys": [...], "text": "..."}``. Raises ``ValueError`` with a one-line
    problem (the settings module puts the setting's name in front)."""
    if isinstance(value, (list, tuple)):
        value = {"entries": list(value)}
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a table of scan_depth and entries (got {value!r})")
    unknown = sorted(set(value) - {"scan_depth", "entries"})
    if unknown:
        raise ValueError(f"takes only scan_depth and entries (got {unknown[0]!r})")
    depth = value.get("scan_depth", DEFAULT_SCAN_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_SCAN_DEPTH:
        raise ValueError(f"scan_depth must be a whole number from 1 to {MAX_SCAN_DEPTH} (got {depth!r})")  # fmt: skip
    entries = value.get("entries", [])
    if not isinstance(entries, (list, tuple)):
        raise ValueError(f"entries must be a list (got {entries!r})")
    return {"scan_depth": depth, "entries": [_entry(i + 1, e) for i, e in enumerate(entries)]}


def _entry(number: int, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping) or set(entry) - {"keys", "text"}:
        raise ValueError(f"entry {number} must be a table of keys and text (got {entry!r})")
    keys = entry.get("keys", [])
    if isinstance(keys, str):
        keys = keys.split(",")
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"entry {number}: keys must be a list of words (got {keys!r})")
    keys = [k.strip() for k in keys if k.strip()]
    text = entry.get("text", "")
    if not isinstance(text, str):
        raise ValueError(f"entry {number}: text must be text (got {text!r})")
    if not keys:
        raise ValueError(f"entry {number} has no keys: give at least one word that triggers it")
    if not text.strip():
        raise ValueError(f"entry {number} ({keys[0]}) has no text")
    return {"keys": keys, "text": text}


@dataclass(frozen=True)
class ContextSpec:
    """One version of what is injected: the four settings, validated.

    Attributes:
        memory: Text before the document in every request.
        authors_note: Text inserted ``authors_note_depth`` lines from the end.
        authors_note_depth: 0 puts the note after the last token; ``d`` at the start of
            the ``d``-th line from the end (the last line, partial or not, is line 1).
        world_info: The normalized ``world_info`` table (:func:`check_world_info`).
    """

    memory: str = ""
    authors_note: str = ""
    authors_note_depth: int = 3
    world_info: dict[str, Any] = field(
        default_factory=lambda: {"scan_depth": DEFAULT_SCAN_DEPTH, "entries": []}
    )

    @classmethod
    def from_settings(cls, settings: Any) -> ContextSpec:
        """The spec in a :class:`~loomterm.config.settings.Settings` (or any object with the
        four attributes)."""
        return cls(
            settings.memory,
            settings.authors_note,
            settings.authors_note_depth,
            settings.world_info,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContextSpec:
        """A spec as :meth:`as_dict` wrote it; raises ``ValueError`` on a bad one."""
        memory, note = data.get("memory", ""), data.get("authors_note", "")
        depth = data.get("authors_note_depth", 3)
        if not isinstance(memory, str) or not isinstance(note, str):
            raise ValueError("memory and authors_note must be text")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"authors_note_depth must be a whole number >= 0 (got {depth!r})")
        return cls(memory, note, depth, check_world_info(data.get("world_info", {})))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (what a session file and the JSON tree keep)."""
        return {
            "memory": self.memory,
            "authors_note": self.authors_note,
            "authors_note_depth": self.authors_note_depth,
            "world_info": self.world_info,
        }

    @property
    def active(self) -> bool:
        """Whether anything could be injected (memory, a note, or a world-info entry)."""
        return bool(self.memory or self.authors_note or self.world_info["entries"])

    @property
    def version(self) -> str:
        """A content id: 12 hex digits of a hash of :meth:`as_dict` ("" when nothing is
        injected, the plain document)."""
        if not self.active:
            return ""
        text = json.dumps(self.as_dict(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class ContextVersions:
    """Every context version nodes were generated with, by id ("" is the plain
    document and is always known)."""

    def __init__(self) -> None:
        self._specs: dict[str, ContextSpec] = {"": ContextSpec()}

    def add(self, spec: ContextSpec) -> tuple[str, bool]:
        """Keep ``spec``; returns (its id, whether it was new)."""
        version = spec.version
        new = version not in self._specs
        self._specs.setdefault(version, spec)
        return version, new

    def get(self, version: str) -> ContextSpec | None:
        return self._specs.get(version)

    def __contains__(self, version: object) -> bool:
        return version in self._specs

    def __len__(self) -> int:
        return len(self._specs) - 1

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Id to spec, JSON-ready, the plain document left out."""
        return {v: spec.as_dict() for v, spec in self._specs.items() if v}

    def load(self, stored: Mapping[str, Any] | None) -> list[str]:
        """Read what :meth:`as_dict` wrote; returns a warning per version it skipped."""
        notes = []
        for version, data in (stored or {}).items():
            try:
                spec = ContextSpec.from_dict(data)
            except (ValueError, AttributeError) as exc:
                notes.append(f"context version {version}: {exc}; skipped")
                continue
            self._specs[spec.version if spec.version == version else version] = spec
        return notes
