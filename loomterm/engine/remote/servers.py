"""What each kind of serving engine is called and answers: one dialect per kind.

- ``llama-server`` (llama.cpp): native ``/completion`` with a token-id prompt,
  ``cache_prompt``, ``n_probs`` (ids, log-probabilities and bytes of the top tokens),
  ``n_cmpl`` siblings over one prompt evaluation, ``/tokenize`` and ``/detokenize``,
  ``timings.prompt_n`` (prompt tokens it evaluated); found by ``/props``.
- ``vllm`` and ``sglang``: OpenAI-style ``/v1/completions`` with a token-id prompt and
  their extra sampling fields (``top_k``, ``min_p``, ``repetition_penalty``); vLLM's
  ``return_tokens_as_token_ids``; found by ``/version`` + ``/v1/models`` and by
  ``/get_model_info``.
- ``openai``: any other ``/v1/completions`` server (a hosted provider).

A dialect builds request bodies and reads stream events into :class:`Token` and
:class:`Finish` records; it knows nothing of the tree.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from loomterm.engine.remote.http import ServerClient
from loomterm.engine.remote.replies import (
    MalformedReply,
    items,
    logprob,
    number,
    raw_bytes,
    reply_table,
    table,
    text,
    token_id,
    whole,
)
from loomterm.engine.sample.chain import TOP_ALTERNATIVES, SamplingParams
from loomterm.errors import ServerError, ServerModelError

KINDS = ("llama-server", "vllm", "sglang", "openai")
# One string through every tokenizer, to check that two tokenizers agree: spaces,
# digits, punctuation, accents, CJK, an emoji and a chat special token.
PROBE_TEXT = (
    "Once upon a time, 1234 naïve cafés sold 日本語 crêpes 🙂 at 9:30 p.m.\n\n"
    "  <|im_start|>user\nWhat's this?"
)


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


# -- detection --------------------------------------------------------------------------


def detect_kind(client: ServerClient) -> tuple[str, dict[str, Any]]:
    """(kind, what the probe endpoint answered), from the endpoints the server has."""
    props = client.get("/props", missing_ok=True)
    if isinstance(props, dict) and (
        "total_slots" in props or "default_generation_settings" in props
    ):
        return "llama-server", props
    info = client.get("/get_model_info", missing_ok=True)
    if isinstance(info, dict) and "model_path" in info:
        return "sglang", info
    version = client.get("/version", missing_ok=True)
    if isinstance(version, dict) and "version" in version:
        return "vllm", version
    return "openai", {}


def dialect_for(kind: str, client: ServerClient, probe: dict[str, Any] | None = None) -> Dialect:
    if kind not in KINDS:
        raise ServerError(f"unknown server kind {kind!r} (use {', '.join(KINDS)})")
    cls = {"llama-server": LlamaServer, "vllm": Vllm, "sglang": Sglang, "openai": OpenAI}[kind]
    return cls(client, probe)


# -- dialects ---------------------------------------------------------------------------


class Dialect:
    """One kind of server. See the module docstring."""

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


def _models(client: ServerClient) -> list[dict[str, Any]]:
    listing = client.get("/v1/models", missing_ok=True)
    data = listing.get("data") if isinstance(listing, dict) else None
    return [m for m in items(data) if isinstance(m, dict) and text(m.get("id"))]


def _choose(
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


class LlamaServer(Dialect):
    """llama.cpp's llama-server, on its native endpoints."""

    kind = "llama-server"
    can_tokenize = True
    batched_siblings = True

    # The local sampler's order (loomterm.engine.sample.chain): penalty, temperature, then
    # the filters. llama-server's default applies temperature last and adds others.
    # Top-n-sigma keeps the same set either side of the temperature.
    SAMPLERS = ["penalties", "temperature", "top_n_sigma", "top_k", "top_p", "min_p"]

    def info(self, wanted_model: str | None) -> ServerInfo:
        props, self.probe = table(self.probe or self.client.get("/props")), {}  # the probe once
        models = _models(self.client)
        chosen = _choose(self.client, self.kind, models, wanted_model)
        meta = table(chosen.get("meta"))
        settings = table(props.get("default_generation_settings"))
        path = text(props.get("model_path")) or chosen.get("id") or ""
        self.model = chosen.get("id") or text(props.get("model_alias")) or path
        return ServerInfo(
            kind=self.kind,
            model=self.model,
            models=[m["id"] for m in models],
            n_ctx=_int(settings.get("n_ctx") or meta.get("n_ctx")),
            vocab_size=_int(meta.get("n_vocab")),
            slots=_int(props.get("total_slots")),
            facts={
                "n_vocab": meta.get("n_vocab"),
                "n_ctx_train": meta.get("n_ctx_train"),
                "n_embd": meta.get("n_embd"),
                "n_params": meta.get("n_params"),
                "weights": [PurePath(path).name, meta.get("size"), meta.get("ftype")],
            },
            tokenizer_hint=path or None,
            eos_text=text(props.get("eos_token")),
            chat_template=text(props.get("chat_template")),
        )

    def tokenize(self, text: str, add_special: bool) -> tuple[list[int], list[bytes | None]]:
        body = {
            "content": text,
            "add_special": add_special,
            "parse_special": True,
            "with_pieces": True,
        }
        reply = reply_table(self.client.post("/tokenize", body), self.client.url, "/tokenize reply")
        url, ids, raws = self.client.url, [], []
        for item in _token_list(reply, url, "/tokenize reply"):
            if isinstance(item, dict):
                ids.append(token_id(item.get("id"), url, "/tokenize reply"))
                raws.append(raw_bytes(item.get("piece"), url, "/tokenize reply"))
            else:
                ids.append(token_id(item, url, "/tokenize reply"))
                raws.append(None)
        return ids, raws

    def detokenize_one(self, token: int) -> bytes:
        reply = table(self.client.post("/detokenize", {"tokens": [int(token)]}))
        return (text(reply.get("content")) or "").encode("utf-8", "surrogatepass")

    def warm(self, tokens: list[int]) -> Finish | None:
        body = {"prompt": tokens, "n_predict": 0, "cache_prompt": True, "stream": False}
        reply = self.client.post("/completion", body, completion=True)
        return _llama_finish(reply if isinstance(reply, dict) else {}, 0)

    def completion(self, tokens, max_new, params, seed, n, cache=True):
        body: dict[str, Any] = {
            "prompt": tokens,
            "n_predict": max_new,
            "stream": True,
            "cache_prompt": cache,
            "n_probs": TOP_ALTERNATIVES,
            "post_sampling_probs": False,  # the model's own distribution, as the local runner stores
            "return_tokens": True,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "top_n_sigma": params.top_n_sigma,
            "repeat_penalty": params.repetition_penalty,
            "repeat_last_n": -1 if params.repetition_penalty != 1.0 else 0,
            "samplers": self.SAMPLERS,
            # Neutralise what llama-server's defaults add beyond loomterm's settings.
            "typical_p": 1.0,
            "xtc_probability": 0.0,
            "dry_multiplier": 0.0,
            "mirostat": 0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "dynatemp_range": 0.0,
            "seed": -1 if seed is None else seed % (1 << 32),
            "timings_per_token": False,
            # Progress events while a long prompt is evaluated: the stream is never
            # silent for long, so a read timeout means a hung server.
            "return_progress": True,
        }
        if n > 1:
            body["n_cmpl"] = n
        return "/completion", body

    def read(self, event):
        if "prompt_progress" in event:  # its "tokens" field is a placeholder, not a token
            return [], []
        url = self.client.url
        index = whole(event.get("index")) or 0
        probs = items(event.get("completion_probabilities"))
        if probs:
            tokens = _llama_tokens(index, probs, url)
        else:
            tokens = [
                Token(index, token_id(t, url, "stream event"), None, None)
                for t in items(event.get("tokens"))
            ]
        finishes = [_llama_finish(event, index)] if event.get("stop") else []
        return tokens, finishes


def _llama_tokens(index: int, probs: list[Any], url: str) -> list[Token]:
    """llama.cpp's per-token records: id, logprob, bytes, and the same for the top."""
    what = "token record"
    tokens = []
    for item in probs:
        item = reply_table(item, url, what)
        top, top_raw = [], {}
        for alt in items(item.get("top_logprobs")):
            alt = reply_table(alt, url, what)
            alt_id = token_id(alt.get("id"), url, what)
            top.append((alt_id, logprob(alt.get("logprob"), url, what)))
            top_raw[alt_id] = raw_bytes(alt.get("bytes"), url, what)
        raw = raw_bytes(item.get("bytes"), url, what)
        tokens.append(
            Token(
                index,
                token_id(item.get("id"), url, what),
                logprob(item.get("logprob"), url, what),
                top or None,
                raw,
                top_raw,
            )
        )
    return tokens


def _llama_finish(event: dict[str, Any], index: int) -> Finish:
    timings = table(event.get("timings"))
    return Finish(
        index,
        text(event.get("stop_type")) or "stop",
        prompt_n=_int(timings.get("prompt_n")),
        cached=_int(timings.get("cache_n", event.get("tokens_cached"))),
        prompt_ms=number(timings.get("prompt_ms")),
        predicted_per_second=number(timings.get("predicted_per_second")),
    )


class OpenAI(Dialect):
    """Any ``/v1/completions`` server (the OpenAI legacy completions API)."""

    kind = "openai"
    # Extra sampling fields the server accepts beyond OpenAI's own.
    extra_sampling = False

    def info(self, wanted_model: str | None) -> ServerInfo:
        models = _models(self.client)
        chosen = _choose(self.client, self.kind, models, wanted_model)
        self.model = chosen.get("id") or wanted_model or ""
        if not self.model:
            raise ServerModelError(
                f"the server at {self.client.url} lists no models: name one with --server-model",
                self.client.url,
            )
        return ServerInfo(
            kind=self.kind,
            model=self.model,
            models=[m["id"] for m in models],
            n_ctx=_int(chosen.get("max_model_len") or chosen.get("context_length")),
            vocab_size=None,
            slots=None,
            facts={"root": text(chosen.get("root")), "owned_by": text(chosen.get("owned_by"))},
            tokenizer_hint=text(chosen.get("root")) or self.model,
        )

    def completion(self, tokens, max_new, params, seed, n, cache=True):
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": tokens,
            "max_tokens": max_new,
            "stream": True,
            "logprobs": TOP_ALTERNATIVES,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": n,
            "echo": False,
        }
        if seed is not None:
            body["seed"] = seed % (1 << 31)
        if self.extra_sampling:
            body.update(
                top_k=params.top_k if params.top_k > 0 else -1,
                min_p=params.min_p,
                repetition_penalty=params.repetition_penalty,
                skip_special_tokens=False,
                spaces_between_special_tokens=False,
            )
        return "/v1/completions", body

    def read(self, event):
        tokens: list[Token] = []
        finishes: list[Finish] = []
        usage = table(event.get("usage"))
        for choice in items(event.get("choices")):
            choice = table(choice)
            index = whole(choice.get("index")) or 0
            tokens.extend(self._tokens(index, choice.get("logprobs")))
            if text(choice.get("finish_reason")):
                finishes.append(Finish(index, choice["finish_reason"]))
        timings = table(event.get("timings"))
        if usage or timings:  # the request's counts (a last chunk of its own on vLLM)
            details = table(usage.get("prompt_tokens_details"))
            cached = _int(details.get("cached_tokens"))
            prompt_n = _int(timings.get("prompt_n"))
            prompt = _int(usage.get("prompt_tokens"))
            if prompt_n is None and prompt is not None:
                prompt_n = prompt - (cached or 0) if cached is not None else None
            finishes.append(Finish(-1, "usage", prompt_n, cached))
        return tokens, finishes

    def _tokens(self, index: int, logprobs: Any) -> list[Token]:
        if not isinstance(logprobs, dict):
            return []
        url, what = self.client.url, "logprobs record"
        if isinstance(logprobs.get("content"), list):  # llama-server's /v1 answers
            return _llama_tokens(index, logprobs["content"], url)
        out = []
        texts = items(logprobs.get("tokens"))
        lps = items(logprobs.get("token_logprobs"))
        tops = items(logprobs.get("top_logprobs"))
        for i, token_text in enumerate(texts):
            token = self.token_id(token_text)
            top = None
            if i < len(tops) and isinstance(tops[i], dict):
                pairs = [(self.token_id(t), logprob(lp, url, what)) for t, lp in tops[i].items()]
                top = sorted([p for p in pairs if p[0] >= 0], key=lambda p: -p[1]) or None
            lp = lps[i] if i < len(lps) else None
            out.append(Token(index, token, None if lp is None else logprob(lp, url, what), top))
        return out

    def token_id(self, text: str) -> int:
        """The id of a token reported as text: ``token_id:N`` (vLLM), else looked up."""
        if not isinstance(text, str):
            raise MalformedReply(
                f"the server at {self.client.url} sent a malformed logprobs record: "
                f"a token that is not text",
                self.client.url,
            )
        if text.startswith("token_id:") and text[9:].isdigit():
            return token_id(int(text[9:]), self.client.url, "logprobs record")
        if self.lookup is not None:
            return self.lookup(text)
        raise ServerError(
            f"the server at {self.client.url} reports tokens as text, not ids; "
            "loomterm needs token ids (use a vLLM, SGLang or llama-server endpoint)"
        )

    lookup = None  # set by the runner: token text -> id, from the local tokenizer


class Vllm(OpenAI):
    """vLLM's OpenAI-compatible server: token ids in and out, extra sampling fields."""

    kind = "vllm"
    extra_sampling = True
    can_tokenize = True
    batched_siblings = True

    def info(self, wanted_model):
        info = super().info(wanted_model)
        info.kind = self.kind
        info.facts["version"] = None  # a vLLM upgrade is not another model
        return info

    def completion(self, tokens, max_new, params, seed, n, cache=True):
        path, body = super().completion(tokens, max_new, params, seed, n, cache)
        body["return_tokens_as_token_ids"] = True
        body["stream_options"] = {"include_usage": True}
        if not cache:
            body["cache_salt"] = hashlib.sha256(str(id(body)).encode()).hexdigest()[:16]
        return path, body

    def tokenize(self, text, add_special):
        reply = self.client.post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": add_special}
        )
        url, what = self.client.url, "/tokenize reply"
        reply = reply_table(reply, url, what)
        ids = [token_id(t, url, what) for t in _token_list(reply, url, what)]
        return ids, [None] * len(ids)


class Sglang(OpenAI):
    """SGLang's OpenAI-compatible server (RadixAttention prefix cache)."""

    kind = "sglang"
    extra_sampling = True
    batched_siblings = True

    def info(self, wanted_model):
        probe, self.probe = table(self.probe or self.client.get("/get_model_info")), {}
        info = super().info(wanted_model)
        info.kind = self.kind
        info.tokenizer_hint = (
            text(probe.get("tokenizer_path"))
            or text(probe.get("model_path"))
            or info.tokenizer_hint
        )
        info.facts["model_path"] = text(probe.get("model_path"))
        return info

    def completion(self, tokens, max_new, params, seed, n, cache=True):
        path, body = super().completion(tokens, max_new, params, seed, n, cache)
        body["return_text_in_logprobs"] = False
        return path, body


def _int(value: Any) -> int | None:
    return whole(value)


def _token_list(reply: dict[str, Any], url: str, what: str) -> list[Any]:
    """A tokenize reply's ``tokens``: a list, or the reply is malformed."""
    tokens = reply.get("tokens")
    if not isinstance(tokens, list):
        raise MalformedReply(f"the server at {url} sent a malformed {what}: no token list", url)
    return tokens
