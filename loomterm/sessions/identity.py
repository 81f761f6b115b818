"""Which model a session belongs to: the record a session file keeps, and comparing it.

A model is identified by its fingerprint (SHA-256 of its config, weights and
tokenizer), so a session is never silently reopened on other weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomterm.store import ModelMismatchError

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.engine.models.load import LoadedModel

FINGERPRINT_KEYS = ("config", "weights", "tokenizer")


def model_record(loaded: LoadedModel | Loom) -> dict[str, Any]:
    """What a session file keeps about its model: name, source, fingerprint, dtype."""
    runner = getattr(loaded, "runner", None)
    return runner.identity() if runner is not None else loaded.identity()


def same_model(stored: dict[str, Any] | None, given: dict[str, Any] | None) -> bool:
    """True when two fingerprints name the same config, weights and tokenizer."""
    stored, given = stored or {}, given or {}
    return all(
        stored.get(key) is not None and stored.get(key) == given.get(key)
        for key in FINGERPRINT_KEYS
    )


def _short(fingerprint: dict[str, Any], key: str) -> str:
    value = str(fingerprint.get(key) or "?")
    return value[:10]


def mismatch_error(name: str, stored: dict[str, Any], loaded: LoadedModel) -> ModelMismatchError:
    """A clear, one-line refusal naming both models and the two ways forward."""
    old = stored.get("fingerprint") or {}
    new = loaded.fingerprint
    differs = [key for key in FINGERPRINT_KEYS if old.get(key) != new.get(key)]
    return ModelMismatchError(
        f"session {name!r} was made with {stored.get('name') or '?'} but this is "
        f"{loaded.name} ({', '.join(differs)} differ: "
        + ", ".join(f"{k} {_short(old, k)} vs {_short(new, k)}" for k in differs)
        + "); its token ids would be wrong here. Open it read-only, or re-tokenize its "
        "text with the new model (--read-only / --retokenize)",
        stored=old,
        given=dict(new),
    )
