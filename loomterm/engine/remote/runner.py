"""The remote runner: a serving engine over HTTP behind the Loom's tree operations.

The tree stays here, lossless; the server's own prefix cache (llama-server's
``cache_prompt``, vLLM's automatic prefix caching, SGLang's RadixAttention) plays the
part of the KV tree. Every operation sends the whole path again as token ids and the
server computes only what changed since a cached prefix, so a truncate, a branch switch
or an exact splice costs the tokens after the change.

- ``prepare`` sends the path to warm the prefix cache (llama-server: ``n_predict: 0``)
  and returns None: there are no full logits here. It never fails an edit: a server
  that cannot be reached is reported by the next generation.
- ``decode`` streams each continuation's tokens, each with its log-probability and
  top-10 alternatives, into the tree through the NodeWriter as they arrive. ``n``
  siblings are one request over one prompt evaluation where the server can (llama-server
  ``n_cmpl``, OpenAI ``n``) and concurrent requests otherwise (and whenever a seed is
  given, so each sibling has its own seed). Setting ``request.cancel`` returns within
  one token and closes the streams, which makes the server stop.
- Splices are always exact (no ``rerope``); refresh has nothing to do.
- Faults are :class:`~loomterm.errors.ServerError` lines; tokens streamed before one
  stay in the tree (and reach the session file). After a fault, and whenever the
  server has been quiet for ``VERIFY_AFTER_S``, the next request first checks that the
  server still serves the same model (its fingerprint).

Threads: one reader thread per stream hands records to the calling thread through a
queue, so every tree change happens on the thread that called ``decode``
(:mod:`~loomterm.engine.remote.streaming`; this module connects, checks the model and
serves the tree operations).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.kv.window import Window
from loomterm.engine.remote import servers
from loomterm.engine.remote.dialect import Dialect, Finish, ServerInfo, tokens_digest
from loomterm.engine.remote.http import ServerClient, Timeouts
from loomterm.engine.remote.streaming import Generation, Job
from loomterm.engine.remote.tokens import (
    ServerTokenText,
    StoredTokenText,
    eos_ids_of,
    load_tokenizer,
    local_encode,
)
from loomterm.engine.runner import Capabilities, Runner
from loomterm.engine.text import TokenText
from loomterm.errors import (
    ContextError,
    InputError,
    LoomError,
    ServerError,
    ServerModelError,
)
from loomterm.tree import Node

VERIFY_AFTER_S = 5.0  # quiet this long: check the model before the next request
UNKNOWN_CTX = 1 << 20
MAX_EXCHANGES = 256  # recent requests' server counts, kept for the bench

WHY_NOT = (
    ("rerope", "a server keeps its own KV cache: splices are recomputed exactly on the server"),
    ("full_logits", "servers send the top-10 log-probabilities per token, not whole distributions"),
    ("node_kv", "the server's prefix cache holds the KV; nothing is stored on the nodes here"),
    ("drafting", "drafted decoding needs the model in this process"),
    ("prompt_logprobs", "prompt log-probabilities would bypass the server's prefix cache"),
    (
        "healing",
        "token healing constrains each of the first tokens to the ones that spell the typed"
        " text; a server's logit_bias is one bias for the whole request, not per step",
    ),
)


@dataclass
class Exchange:
    """What the server reported for one request (the bench reads it).

    ``prompt_n``: prompt tokens the server evaluated (the rest came from its cache);
    ``cached``: prompt tokens it reused; ``seconds``: wall time of the request.
    """

    what: str
    prompt_tokens: int
    prompt_n: int | None
    cached: int | None
    seconds: float
    first_token_s: float | None = None


class RemoteRunner(Runner):
    """A serving engine behind the Loom. See the module docstring.

    Attributes:
        client: The HTTP client (``http.ServerClient``).
        dialect: How this kind of server is spoken to (``dialect.Dialect``).
        info: What the server said about its model (None while offline).
        tokenizer: The local Hugging Face tokenizer, or None (the server tokenizes).
        tokenizer_source: Where the local tokenizer came from, or None.
        exchanges: What the server reported for recent requests (newest last).
        warning: The last fault a warm-up (``prepare``) met, or None.
    """

    def __init__(
        self,
        url: str,
        server_kind: str | None = None,
        server_model: str | None = None,
        tokenizer: str | None = None,
        timeouts: Timeouts | None = None,
        expect: dict[str, Any] | None = None,
        connect: bool = True,
        named_by: str = "user",
    ) -> None:
        # ``named_by``: who named ``url`` ("user" or "file"), which decides whether a
        # key may go there (``credentials.resolve``).
        self.client = ServerClient(url, timeouts, named_by=named_by)
        self.url = self.client.url
        self.where = self.url
        self.server_kind = server_kind
        self.server_model = server_model
        self.tokenizer_source = tokenizer
        self.tokenizer: Any = None
        self.dialect: Dialect | None = None
        self.info: ServerInfo | None = None
        self.fingerprint: dict[str, str] = dict(expect or {})
        self.tokens_by = "server"
        self.exchanges: list[Exchange] = []
        self.warning: ServerError | None = None
        self._checked = 0.0  # monotonic time the model was last confirmed
        self._lock = threading.Lock()
        self.name = (expect or {}).get("name") or self.url
        self.codec: TokenText = StoredTokenText({})
        self.vocab_size = 1 << 31
        self.eos_ids: frozenset[int] = frozenset()
        self.n_ctx = UNKNOWN_CTX
        self.window = Window.for_context(self.n_ctx)
        self.capabilities = Capabilities(why_not=WHY_NOT)
        if connect:
            self._connect(expect)

    # -- connecting ----------------------------------------------------------------------
    @classmethod
    def offline(cls, record: dict[str, Any], codec: TokenText, error: ServerError) -> RemoteRunner:
        """A runner for a session whose server is unreachable: it shows the stored text,
        and connects (checking the model) when the server answers again."""
        server = record.get("server") or {}
        runner = cls(
            record.get("source") or "",
            server_kind=server.get("kind"),
            server_model=server.get("model_arg"),
            tokenizer=server.get("tokenizer_source"),
            expect=record.get("fingerprint"),
            connect=False,
            named_by="file",
        )
        runner.name = record.get("name") or runner.url
        runner.codec = codec
        runner.tokenizer = getattr(codec, "tokenizer", None)
        runner.warning = error
        return runner

    def _connect(self, expect: dict[str, Any] | None) -> None:
        """Probe the server, choose the tokenizer, check the model against ``expect``."""
        client = self.client
        if self.server_kind:
            kind, probe = self.server_kind, {}
        else:
            kind, probe = servers.detect_kind(client)
        dialect = servers.dialect_for(kind, client, probe)
        info = dialect.info(self.server_model)
        probe_ids = dialect.tokenize(servers.PROBE_TEXT, False)[0] if dialect.can_tokenize else None
        if self.dialect is None or self.info is None:
            self._choose_tokenizer(dialect, info, probe_ids)
        if probe_ids is None:
            probe_ids = local_encode(self.tokenizer, servers.PROBE_TEXT, False)
        fingerprint = info.fingerprint(tokens_digest(probe_ids, info.vocab_size))
        if expect and not _same(expect, fingerprint):
            raise _changed(self.url, expect, fingerprint)  # and keep the old model's state
        if isinstance(dialect, servers.OpenAI):
            dialect.lookup = self._token_for_text
        self.dialect, self.info = dialect, info
        self.fingerprint = fingerprint
        self.name = info.display_name
        self.n_ctx = info.n_ctx or UNKNOWN_CTX
        self.window = Window.for_context(self.n_ctx)
        if info.vocab_size:
            self.vocab_size = info.vocab_size
        elif self.tokenizer is not None:
            self.vocab_size = len(self.tokenizer)
        self.eos_ids = frozenset(self._eos_ids(dialect, info))
        slots = info.slots or 1
        batched = dialect.batched_siblings
        why_not = WHY_NOT
        if not batched:
            why_not += (("batched_siblings", "this server takes one continuation per request"),)
        self.capabilities = Capabilities(batched_siblings=batched, why_not=why_not)
        self.slots = slots
        self._checked = time.monotonic()

    def _choose_tokenizer(
        self, dialect: Dialect, info: ServerInfo, server_ids: list[int] | None
    ) -> None:
        """The local tokenizer when one is found and agrees with the server on the probe
        text (``server_ids``; None: the server cannot say), else the server's own."""
        candidates = [c for c in (self.tokenizer_source, info.tokenizer_hint) if c]
        for source in candidates:
            try:
                tokenizer = load_tokenizer(source)
            except LoomError:
                continue
            if (
                server_ids is None
                or local_encode(tokenizer, servers.PROBE_TEXT, False) == server_ids
            ):
                self.tokenizer, self.tokenizer_source = tokenizer, str(source)
                self.codec = TokenText(tokenizer)
                self.tokens_by = "local" if server_ids is not None else "local (unverified)"
                return
        if not dialect.can_tokenize:
            raise ServerModelError(
                f"the server at {self.url} ({dialect.kind}) cannot tokenize and no local "
                f"tokenizer was found for {info.model!r}: name one with tokenizer=...",
                self.url,
            )
        self.tokenizer, self.tokenizer_source = None, None
        self.codec = ServerTokenText(dialect.detokenize_one)
        self.tokens_by = "server"

    def _eos_ids(self, dialect: Dialect, info: ServerInfo) -> set[int]:
        ids = set(self.eos_ids)
        if self.tokenizer is not None:
            ids |= eos_ids_of(self.tokenizer)
        elif info.eos_text and dialect.can_tokenize:
            found = dialect.tokenize(info.eos_text, False)[0]
            if len(found) == 1:
                ids.add(found[0])
        return ids

    def _ready(self, strict: bool = False) -> Dialect:
        """Connected and still on the same model: checked in full after a fault or a
        quiet spell, and (``strict``, before each generation) by the server's model facts."""
        with self._lock:
            stale = time.monotonic() - self._checked > VERIFY_AFTER_S
            if self.dialect is None or self.info is None or stale:
                self._connect(self.fingerprint or None)
            elif strict:  # the model's facts, without the tokenizer probe
                info = self.dialect.info(self.server_model)
                now = info.fingerprint(self.fingerprint.get("tokenizer", ""))
                if not _same(self.fingerprint, now):
                    self.recheck_model()
                    self._connect(self.fingerprint)  # raises, naming all that differs
                self._checked = time.monotonic()
            assert self.dialect is not None
            return self.dialect

    def recheck_model(self) -> None:
        """Check the server's model again before the next request (after a fault)."""
        self._checked = 0.0

    def _token_for_text(self, text: str) -> int:
        if self.tokenizer is not None:
            ids = local_encode(self.tokenizer, text, False)
            if len(ids) == 1:
                return ids[0]
        if isinstance(self.codec, ServerTokenText):
            return self.codec.lookup_text(text)
        return -1

    # -- identity and text ---------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The session's model record: the URL (never a key), the fingerprint, the kind
        of server and which tokenizer made the tokens."""
        info = self.info
        return {
            "name": self.name,
            "source": self.url,
            "fingerprint": dict(self.fingerprint),
            "dtype": "server",
            "server": {
                "kind": info.kind if info else self.server_kind,
                "model": info.model if info else None,
                "model_arg": self.server_model,
                "tokens_by": self.tokens_by,
                "tokenizer_source": self.tokenizer_source,
            },
        }

    def encode(self, text: str, at_start: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise InputError("text must be a string")
        if not text:
            return []
        if self.tokenizer is not None:
            return local_encode(self.tokenizer, text, at_start)
        dialect = self._ready()
        ids, raws = dialect.tokenize(text, at_start)
        if isinstance(self.codec, ServerTokenText):
            for token, raw in zip(ids, raws):
                self.codec.learn(token, raw)
        return ids

    # -- what the Loom asks ----------------------------------------------------------------
    def window_tokens(self, node: Node, reserve: int = 0) -> list[int]:
        """The token ids the server is sent for ``node``'s path, leaving ``reserve``
        positions free: past the server's context, the first ``n_keep`` and the latest
        rest, shifted in blocks so the server's cached prefix stays valid between shifts;
        with injected text, the sequence ``engine.context`` assembles."""
        if (assembled := self.context_for(node, reserve)) is not None:
            return assembled.tokens
        tokens = node.path_tokens()
        if len(tokens) + reserve <= self.n_ctx:
            return tokens
        if reserve >= self.n_ctx - self.window.n_keep:
            raise ContextError(
                f"{reserve} new tokens do not fit the server's context of {self.n_ctx} tokens"
            )
        shift = self.window.shift_for(len(tokens) + reserve)
        return tokens[: self.window.n_keep] + tokens[self.window.n_keep + shift :]

    def prepare(self, node: Node) -> None:
        """Warm the server's prefix cache with ``node``'s path (see the module doc)."""
        if node.end == 0:
            return None
        start = time.perf_counter()
        try:
            dialect = self._ready()
            tokens = self.window_tokens(node)
            finish = dialect.warm(tokens)
        except ServerError as exc:
            self.warning = exc
            self.recheck_model()
            return None
        self.warning = None
        if finish is not None:
            self.record_exchange("prepare", len(tokens), finish, time.perf_counter() - start)
        return None

    def decode(self, request: GenerateRequest, writer: NodeWriter) -> GenerateResult:
        start = time.perf_counter()
        dialect = self._ready(strict=True)
        reserve = max(1, min(request.max_new_tokens, self.n_ctx // 2))
        tokens = self.window_tokens(request.node, reserve)
        max_new = min(request.max_new_tokens, self.n_ctx - len(tokens))
        if max_new <= 0 or request.cancelled:
            return GenerateResult()
        jobs = self._plan(request, dialect)
        run = Generation(self, request, writer, tokens, max_new, jobs, start)
        return run.go()

    def _plan(self, request: GenerateRequest, dialect: Dialect) -> list[Job]:
        """Which requests make the ``n`` siblings: one with the server's ``n`` where it
        batches them and no seed asks for distinct streams, else one per sibling."""
        n = request.n
        if n > 1 and request.seed is None and dialect.batched_siblings:
            width = self.slots if dialect.kind == "llama-server" else n
            jobs, row = [], 0
            while row < n:
                count = min(width, n - row)
                jobs.append(Job(first_row=row, n=count, seed=None))
                row += count
            return jobs
        return [
            Job(first_row=row, n=1, seed=None if request.seed is None else request.seed + row)
            for row in range(n)
        ]

    def record_exchange(
        self, what: str, prompt: int, finish: Finish, seconds: float, first=None
    ) -> None:
        """Keep one request's figures (``exchanges``, the last ``MAX_EXCHANGES``)."""
        self.exchanges.append(
            Exchange(what, prompt, finish.prompt_n, finish.cached, seconds, first)
        )
        del self.exchanges[:-MAX_EXCHANGES]

    def close(self) -> None:
        self.client.close()


def _changed(url: str, expect: dict[str, Any], now: dict[str, Any]) -> ServerModelError:
    return ServerModelError(
        f"the server at {url} now serves {now.get('name')}, not {expect.get('name') or 'the model'} "
        f"this tree was made with ({_differs(expect, now)} differ): restart it on that model to "
        "go on (the tree is unchanged)",
        url,
    )


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(
        a.get(k) is not None and a.get(k) == b.get(k) for k in ("config", "weights", "tokenizer")
    )


def _differs(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = [k for k in ("config", "weights", "tokenizer") if a.get(k) != b.get(k)]
    return ", ".join(keys) or "fingerprints"
