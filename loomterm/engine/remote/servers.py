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

A dialect builds request bodies and reads stream events into ``Token`` and ``Finish``
records (``dialect``); it knows nothing of the tree. llama-server's own dialect is in
``llama_server``; the OpenAI-style ones are here.
"""

from __future__ import annotations

import hashlib
from typing import Any

from loomterm.engine.remote.dialect import (
    Dialect,
    Finish,
    ServerInfo,
    Token,
    choose_model,
    served_models,
    token_list,
)
from loomterm.engine.remote.http import ServerClient
from loomterm.engine.remote.llama_server import LlamaServer, llama_tokens
from loomterm.engine.remote.replies import (
    MalformedReply,
    items,
    logprob,
    reply_table,
    table,
    text,
    token_id,
    whole,
)
from loomterm.engine.sample.chain import TOP_ALTERNATIVES
from loomterm.errors import ServerError, ServerModelError

KINDS = ("llama-server", "vllm", "sglang", "openai")
# One string through every tokenizer, to check that two tokenizers agree: spaces,
# digits, punctuation, accents, CJK, an emoji and a chat special token.
PROBE_TEXT = (
    "Once upon a time, 1234 naïve cafés sold 日本語 crêpes 🙂 at 9:30 p.m.\n\n"
    "  <|im_start|>user\nWhat's this?"
)


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


# -- OpenAI-style dialects ---------------------------------------------------------------


class OpenAI(Dialect):
    """Any ``/v1/completions`` server (the OpenAI legacy completions API)."""

    kind = "openai"
    # Extra sampling fields the server accepts beyond OpenAI's own.
    extra_sampling = False

    def info(self, wanted_model: str | None) -> ServerInfo:
        models = served_models(self.client)
        chosen = choose_model(self.client, self.kind, models, wanted_model)
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
            n_ctx=whole(chosen.get("max_model_len") or chosen.get("context_length")),
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
            cached = whole(details.get("cached_tokens"))
            prompt_n = whole(timings.get("prompt_n"))
            prompt = whole(usage.get("prompt_tokens"))
            if prompt_n is None and prompt is not None:
                prompt_n = prompt - (cached or 0) if cached is not None else None
            finishes.append(Finish(-1, "usage", prompt_n, cached))
        return tokens, finishes

    def _tokens(self, index: int, logprobs: Any) -> list[Token]:
        if not isinstance(logprobs, dict):
            return []
        url, what = self.client.url, "logprobs record"
        if isinstance(logprobs.get("content"), list):  # llama-server's /v1 answers
            return llama_tokens(index, logprobs["content"], url)
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
        ids = [token_id(t, url, what) for t in token_list(reply, url, what)]
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
