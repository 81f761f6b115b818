"""TEMPORARY stand-in; replaced by the settings branch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from loomterm.errors import InputError


@dataclass(frozen=True)
class Settings:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_new_tokens: int = 128
    n: int = 4
    splice_mode: str = "fast"
    kv_snapshot: bool = False
    drafting: str = "auto"

    def replace(self, **changes):
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise InputError(f"unknown setting: {', '.join(sorted(unknown))}")
        return replace(self, **changes)

    def as_dict(self):
        return asdict(self)

    def sampling(self):
        d = self.as_dict()
        return {k: d[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")}

    @classmethod
    def from_stored(cls, mapping):
        names = {f.name for f in fields(cls)}
        return cls().replace(**{k: v for k, v in mapping.items() if k in names}), []
