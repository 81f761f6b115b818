"""loomterm over a serving engine: llama-server, vLLM, SGLang, any OpenAI-compatible
completions server. ``connect(url)`` gives a :class:`RemoteRunner` for ``Loom(runner)``;
``Loom.load(model="http://...")`` does it for you.

- ``credentials``: which key, headers and body fields go to which server.
- ``http``: the HTTP client, SSE streams, and every fault as a one-line ServerError.
- ``servers``: one dialect per kind of server, and detecting the kind.
- ``tokens``: which tokenizer makes the tokens; codecs without a local tokenizer.
- ``runner``: the Runner itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomterm.engine.remote.runner import RemoteRunner

URL_SCHEMES = ("http://", "https://")


def is_server_url(model: Any) -> bool:
    """True when a ``--model`` value names a server rather than a model."""
    return isinstance(model, str) and model.strip().lower().startswith(URL_SCHEMES)


def connect(
    url: str,
    server_kind: str | None = None,
    server_model: str | None = None,
    tokenizer: str | None = None,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    expect: dict[str, Any] | None = None,
    named_by: str = "user",
) -> RemoteRunner:
    """Connect to the server at ``url`` and return its runner.

    Args:
        server_kind: "llama-server", "vllm", "sglang" or "openai"; None detects it.
        server_model: The model to use on a server with several.
        tokenizer: A local tokenizer to use (folder, .gguf, hub id, "default") when it
            agrees with the server's; None looks for the one the server loaded.
        connect_timeout, read_timeout: Seconds (defaults: ``http.Timeouts``).
        expect: A fingerprint the server's model must match (a session's).
        named_by: Who named ``url``: "user" (the command line, the program: the
            environment's key may go to its origin) or "file" (a session file, an
            import, a model table: no key unless the config or the user allows it;
            ``remote.credentials``).

    Raises:
        ServerError: one line, for every way the server can fail to answer.
    """
    from loomterm.engine.remote.http import Timeouts
    from loomterm.engine.remote.runner import RemoteRunner

    base = Timeouts()
    timeouts = Timeouts(
        connect=connect_timeout if connect_timeout is not None else base.connect,
        read=read_timeout if read_timeout is not None else base.read,
    )
    return RemoteRunner(
        url,
        server_kind=server_kind,
        server_model=server_model,
        tokenizer=tokenizer,
        timeouts=timeouts,
        expect=expect,
        named_by=named_by,
    )


__all__ = ["connect", "is_server_url"]
