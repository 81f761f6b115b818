"""loomterm's exception types. Each carries a one-line message fit to show a user."""

from __future__ import annotations


class LoomError(Exception):
    """Base class: a user-facing error with a one-line message."""


class ModelLoadError(LoomError):
    """The model could not be found, fetched, converted or loaded."""


class NotCausalLMError(ModelLoadError):
    """The model exists but is not a causal language model."""


class EditRangeError(LoomError, IndexError):
    """A position or range lies outside the path."""


class EmptyEditError(LoomError, ValueError):
    """An edit that changes nothing."""


class ContextError(LoomError, ValueError):
    """``n_ctx`` is too small or too large for the model."""


class SessionError(LoomError):
    """A session file is missing, corrupt, locked, or from another model or schema."""


class InputError(LoomError, ValueError):
    """Text or arguments the engine cannot accept."""
