"""llama.cpp's ``llama-server`` dialect: native ``/completion`` with a token-id prompt,
``cache_prompt``, ``n_probs`` (ids, log-probabilities and bytes of the top tokens),
``n_cmpl`` siblings over one prompt evaluation, ``/tokenize`` and ``/detokenize``,
``timings.prompt_n`` (prompt tokens it evaluated). See ``loomterm.engine.remote.servers``.
"""

from __future__ import annotations

from pathlib import PurePath
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
from loomterm.engine.remote.replies import (
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
from loomterm.engine.sample.chain import TOP_ALTERNATIVES


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
        models = served_models(self.client)
        chosen = choose_model(self.client, self.kind, models, wanted_model)
        meta = table(chosen.get("meta"))
        settings = table(props.get("default_generation_settings"))
        path = text(props.get("model_path")) or chosen.get("id") or ""
        self.model = chosen.get("id") or text(props.get("model_alias")) or path
        return ServerInfo(
            kind=self.kind,
            model=self.model,
            models=[m["id"] for m in models],
            n_ctx=whole(settings.get("n_ctx") or meta.get("n_ctx")),
            vocab_size=whole(meta.get("n_vocab")),
            slots=whole(props.get("total_slots")),
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
        url = self.client.url
        ids: list[int] = []
        raws: list[bytes | None] = []  # None: the server gave no piece
        for item in token_list(reply, url, "/tokenize reply"):
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
        return llama_finish(reply if isinstance(reply, dict) else {}, 0)

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
            tokens = llama_tokens(index, probs, url)
        else:
            tokens = [
                Token(index, token_id(t, url, "stream event"), None, None)
                for t in items(event.get("tokens"))
            ]
        finishes = [llama_finish(event, index)] if event.get("stop") else []
        return tokens, finishes


def llama_tokens(index: int, probs: list[Any], url: str) -> list[Token]:
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


def llama_finish(event: dict[str, Any], index: int) -> Finish:
    timings = table(event.get("timings"))
    return Finish(
        index,
        text(event.get("stop_type")) or "stop",
        prompt_n=whole(timings.get("prompt_n")),
        cached=whole(timings.get("cache_n", event.get("tokens_cached"))),
        prompt_ms=number(timings.get("prompt_ms")),
        predicted_per_second=number(timings.get("predicted_per_second")),
    )
