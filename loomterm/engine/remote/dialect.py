"""What every serving engine's dialect shares: the records a stream is read into, what a
server says of itself, and the dialect's base (``loomterm.engine.remote.servers``: one
dialect per kind of server).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from loomterm.engine.remote.http import ServerClient
from loomterm.engine.remote.replies import MalformedReply, items, text
from loomterm.engine.sample.chain import SamplingParams
from loomterm.errors import ServerError, ServerModelError


@dataclass
class Token:
    """One streamed token of continuation ``index``.

    ``raw`` is the token's bytes when the server said (llama-server does), and
    ``top_raw`` the alternatives' bytes; a server-side codec learns from them.
    """

    index: int
    id: int
    logprob: float | None
    top: list[tuple[int, float]] | None
    raw: bytes | None = None
    top_raw: dict[int, bytes] = field(default_factory=dict)


@dataclass
class Finish:
    """Continuation ``index`` ended: ``reason`` ("eos", "length", "stop"...) and what
    the server counted (``prompt_n``: prompt tokens it evaluated; ``cached``: reused)."""

    index: int
    reason: str
    prompt_n: int | None = None
    cached: int | None = None
    prompt_ms: float | None = None
    predicted_per_second: float | None = None


@dataclass
class ServerInfo:
    """What a server says about itself and its model."""

    kind: str
    model: str  # the name requests carry (``model`` field), or the model file's name
    models: list[str]
    n_ctx: int | None
    vocab_size: int | None
    slots: int | None  # parallel slots (llama-server), None where unknown
    facts: dict[str, Any]  # stable facts about the model, for the fingerprint
    tokenizer_hint: str | None  # a local path or hub id its tokenizer can be read from
    eos_text: str | None = None
    chat_template: str | None = None

    @property
    def display_name(self) -> str:
        name = PurePath(self.model).name if "/" in self.model or "\\" in self.model else self.model
        return name.removesuffix(".gguf") or self.kind

    def fingerprint(self, tokenizer_digest: str) -> dict[str, str]:
        """The model's fingerprint: the same server restarted on the same model gives
        the same one; another model (or another tokenizer) gives another."""
        facts = {k: v for k, v in sorted(self.facts.items()) if v is not None}
        config = _digest({"kind": self.kind, **{k: facts[k] for k in facts if k != "weights"}})
        weights = _digest({"model": self.display_name, "weights": facts.get("weights")})
        return {
            "name": self.display_name,
            "config": config,
            "weights": weights,
            "tokenizer": tokenizer_digest,
        }


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def tokens_digest(ids: list[int], vocab_size: int | None) -> str:
    """Fingerprint of a tokenizer: its ids for :data:`PROBE_TEXT` and its vocabulary size."""
    return _digest({"probe": ids, "vocab": vocab_size})


class Dialect:
    """One kind of server (see ``loomterm.engine.remote.servers``)."""

    kind = "openai"
    can_tokenize = False
    # Whether ``n`` siblings share one prompt evaluation on the server.
    batched_siblings = False

    def __init__(self, client: ServerClient, probe: dict[str, Any] | None = None) -> None:
        self.client = client
        self.probe = probe or {}
        self.model = ""  # the name sent in requests, once chosen

    def info(self, wanted_model: str | None) -> ServerInfo:
        raise NotImplementedError

    def tokenize(self, text: str, add_special: bool) -> tuple[list[int], list[bytes | None]]:
        raise ServerError(f"the {self.kind} server at {self.client.url} cannot tokenize text")

    def detokenize_one(self, token: int) -> bytes:
        raise ServerError(f"the {self.kind} server at {self.client.url} cannot detokenize")

    def warm(self, tokens: list[int]) -> Finish | None:
        """Evaluate ``tokens`` into the server's prefix cache, generating nothing."""
        return None

    def completion(
        self,
        tokens: list[int],
        max_new: int,
        params: SamplingParams,
        seed: int | None,
        n: int,
        cache: bool = True,
    ) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def read(self, event: dict[str, Any]) -> tuple[list[Token], list[Finish]]:
        raise NotImplementedError


def served_models(client: ServerClient) -> list[dict[str, Any]]:
    listing = client.get("/v1/models", missing_ok=True)
    data = listing.get("data") if isinstance(listing, dict) else None
    return [m for m in items(data) if isinstance(m, dict) and text(m.get("id"))]


def choose_model(
    client: ServerClient, kind: str, models: list[dict[str, Any]], wanted: str | None
) -> dict:
    names = [m["id"] for m in models]
    if wanted:
        for m in models:
            if wanted == m["id"] or wanted in items(m.get("aliases")):
                return m
        served = ", ".join(names[:8]) or "none listed"
        raise ServerModelError(
            f"the server at {client.url} ({kind}) has no model {wanted!r} (it serves: {served})",
            client.url,
        )
    if len(models) > 1:
        raise ServerModelError(
            f"the server at {client.url} ({kind}) serves {len(models)} models "
            f"({', '.join(names[:8])}): choose one with --server-model",
            client.url,
        )
    return models[0] if models else {}


def token_list(reply: dict[str, Any], url: str, what: str) -> list[Any]:
    """A tokenize reply's ``tokens``: a list, or the reply is malformed."""
    tokens = reply.get("tokens")
    if not isinstance(tokens, list):
        raise MalformedReply(f"the server at {url} sent a malformed {what}: no token list", url)
    return tokens
