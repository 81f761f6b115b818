"""loomterm's exception types. Each carries a one-line message fit to show a user."""

from __future__ import annotations


class LoomError(Exception):
    """Base class: a user-facing error with a one-line message."""


class ModelLoadError(LoomError):
    """The model could not be found, fetched, converted or loaded."""


class NotCausalLMError(ModelLoadError):
    """The model exists but is not a causal language model."""


class UnsupportedModelError(NotCausalLMError):
    """A causal LM whose state loomterm cannot branch (state-space, hybrid, latent
    attention), or a model that is not a decoder-only transformer at all."""


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


class ServerError(LoomError):
    """A serving engine (llama-server, vLLM, SGLang, an OpenAI-compatible provider)
    could not be reached or refused a request. Tokens streamed before it stay in the tree.

    Attributes:
        url: The server's address (never with a key in it).
        status: The HTTP status, when the server answered with one.
    """

    def __init__(self, message: str, url: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class ServerUnreachable(ServerError):
    """Nothing answers at the address (not running, wrong port, no route)."""


class ServerTimeout(ServerError):
    """The server accepted the connection but did not answer in time."""


class ServerStreamCut(ServerError):
    """The server closed a stream before its end (it died or restarted)."""


class ServerAuthError(ServerError):
    """The server refused the API key (401/403)."""


class ServerRateLimited(ServerError):
    """The server answered 429 longer than loomterm waits.

    Attributes:
        retry_after: Seconds the server asked to wait, when it said.
    """

    def __init__(self, message: str, url: str = "", retry_after: float | None = None) -> None:
        super().__init__(message, url, 429)
        self.retry_after = retry_after


class ServerModelError(ServerError):
    """The model asked for is not on the server, or the server now serves another one."""


class PrefillCancelled(LoomError):
    """Reading a path into the model was stopped (``Loom.interrupt`` was set) between
    two chunks. The tree is intact: an edit or append that was being read is in it
    whole, as ``node``, and what was not computed yet is computed when next needed."""

    def __init__(
        self, message: str = "stopped before the model read the whole text", evaluated: int = 0
    ) -> None:
        super().__init__(message)
        self.node = None  # set by the Loom: where the operation left the tree
        self.evaluated = evaluated  # tokens the runner had read when it stopped
