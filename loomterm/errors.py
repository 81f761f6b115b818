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


class PrefillCancelled(LoomError):
    """Reading a path into the model was stopped (``Loom.interrupt`` was set) between
    two chunks. The tree is intact: an edit or append that was being read is in it
    whole, as ``node``, and what was not computed yet is computed when next needed."""

    def __init__(self, message: str = "stopped before the model read the whole text") -> None:
        super().__init__(message)
        self.node = None  # set by the Loom: where the operation left the tree
