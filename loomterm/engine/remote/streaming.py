"""One remote ``decode``: the server's streams read on threads, the tokens written into
the tree on the calling thread.

:class:`RemoteRunner.decode <loomterm.engine.remote.runner.RemoteRunner.decode>` plans
the requests (:class:`Job`: one per sibling, or one for several where the server batches
them) and hands them to a :class:`Generation`: one reader thread per stream puts what it
reads on a queue; the thread that called ``decode`` takes it off, adds each token to
its sibling through the NodeWriter, and stops on cancel (within ``POLL_S``), at the end
of every stream, or on a fault, which it words as a :class:`~loomterm.errors.ServerError`
line saying how many tokens were kept.

A stream has a deadline between tokens (the client's read timeout, 60 s by default):
keep-alive pings, comments, empty lines, repeated progress and events without tokens do
not move it, so a server that trickles a byte every 25 s, or pings forever, ends in one
``ServerTimeout`` line with the tokens kept. Before the first token, prompt progress
that advances (the server reading a long prompt) moves it. A single line is capped
(``remote.sse``).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from loomterm.engine.generation import GenerateRequest, GenerateResult, NodeWriter
from loomterm.engine.remote.dialect import Finish, Token
from loomterm.engine.remote.tokens import ServerTokenText
from loomterm.engine.text import StreamDecoder
from loomterm.errors import ServerError, ServerStreamCut, ServerTimeout, ServerUnreachable
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine.remote.dialect import Dialect
    from loomterm.engine.remote.http import ServerClient
    from loomterm.engine.runner import Progress
    from loomterm.engine.text import TokenText


class StreamHost(Protocol):
    """What a :class:`Generation` reads of its runner (``remote.runner.RemoteRunner``,
    which sits above this module)."""

    url: str
    client: ServerClient
    dialect: Dialect | None
    codec: TokenText
    eos_ids: frozenset[int]
    progress: Progress | None

    def recheck_model(self) -> None: ...

    def record_exchange(
        self, what: str, prompt: int, finish: Finish, seconds: float, first=None
    ) -> None: ...


POLL_S = 0.02  # how often decode looks at the cancel flag while waiting for tokens
FINAL_EVENT_WAIT_S = 1.0  # after the last token: wait this long for the server's counts
# When nothing at all comes, the reader's read timeout (as long as the deadline) speaks
# first, with its own line; the deadline is for a server that sends, but no tokens.
READ_TIMEOUT_FIRST_S = 1.0


@dataclass
class Job:
    """One request: rows ``first_row .. first_row + n - 1``, with one seed or none."""

    first_row: int
    n: int
    seed: int | None
    stream: Any = None
    tokens: int = 0
    ended: bool = False


class Generation:
    """One ``decode``: reader threads feed a queue; this thread writes the tree."""

    def __init__(
        self,
        runner: StreamHost,
        request: GenerateRequest,
        writer: NodeWriter,
        prompt: list[int],
        max_new: int,
        jobs: list[Job],
        start: float,
    ) -> None:
        self.runner, self.request, self.writer = runner, request, writer
        self.prompt, self.max_new, self.jobs, self.start = prompt, max_new, jobs, start
        self.records: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.kids: dict[int, Node] = {}
        self.counts: dict[int, int] = {}
        self.finished: set[int] = set()
        self.streams: dict[int, StreamDecoder] = {}
        self.first_token: float | None = None
        self.finishes: list[Finish] = []
        self.token_deadline = runner.client.timeouts.read  # seconds without a token
        self.last_sign = time.monotonic()  # the last token (or advancing prompt progress)
        self.prompt_read = -1  # the prompt progress seen so far (tokens processed)

    def go(self) -> GenerateResult:
        threads = [
            threading.Thread(target=self._read, args=(job,), daemon=True, name="loomterm-stream")
            for job in self.jobs
        ]
        for thread in threads:
            thread.start()
        error: BaseException | None = None
        try:
            error = self._write_until_done()
        finally:
            self.stop.set()
            for job in self.jobs:
                if job.stream is not None:
                    job.stream.close()
            for thread in threads:
                thread.join(timeout=0.2)
        if error is not None:
            self.runner.recheck_model()
            raise error
        self._report()
        kids = [self.kids[row] for row in sorted(self.kids)]
        first = self.first_token if self.first_token is not None else time.perf_counter()
        return GenerateResult(
            children=kids,
            prefill_seconds=first - self.start,
            decode_seconds=time.perf_counter() - first,
        )

    # -- the reader threads -------------------------------------------------------------
    def _read(self, job: Job) -> None:
        runner = self.runner
        dialect = runner.dialect
        assert dialect is not None
        try:
            params = self.request.sampling
            path, body = dialect.completion(self.prompt, self.max_new, params, job.seed, job.n)
            job.stream = runner.client.stream(path, body, self.stop)
            if self.stop.is_set():  # cancelled while the stream was opening
                job.stream.close()
                return
            for event in job.stream:
                progress = event.get("prompt_progress")
                if isinstance(progress, dict) and runner.progress is not None:
                    self.records.put((job, "prefill", progress))
                tokens, finishes = dialect.read(event)
                job.stream.tokens += len(tokens)
                self.records.put((job, tokens, finishes))
                if self.stop.is_set():
                    return
            job.ended = True
            self.records.put((job, None, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the writing thread
            if not self.stop.is_set():
                self.records.put((job, exc, None))

    # -- the writing thread ------------------------------------------------------------------
    def _write_until_done(self) -> BaseException | None:
        open_jobs = len(self.jobs)
        rows = sum(job.n for job in self.jobs)
        grace = None  # once every row has its tokens: how long to wait for the counts
        while open_jobs:
            if self.request.cancelled:
                return None
            if grace is None and len(self.finished) >= rows:
                grace = time.monotonic() + FINAL_EVENT_WAIT_S
            if grace is not None and time.monotonic() > grace:
                return None
            silent = time.monotonic() - self.last_sign
            if grace is None and silent > self.token_deadline + READ_TIMEOUT_FIRST_S:
                return self._silent()
            try:
                job, tokens, finishes = self.records.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if isinstance(tokens, BaseException):
                return self._explain(job, tokens)
            if tokens == "prefill":  # the server's prompt progress, for a long prompt
                done, total = finishes.get("processed"), finishes.get("total")
                if isinstance(done, int) and done > self.prompt_read and not self.kids:
                    self.prompt_read = done  # it is reading the prompt: real work
                    self.last_sign = time.monotonic()
                if isinstance(done, int) and isinstance(total, int) and self.runner.progress:
                    self.runner.progress("prefill", done, total)
                continue
            if tokens is None:  # that stream ended
                open_jobs -= 1
                rows_of_job = range(job.first_row, job.first_row + job.n)
                if any(r not in self.finished for r in rows_of_job):
                    return self._cut(job)
                continue
            for token in tokens:
                self._push(job, token)
                if self.request.cancelled:
                    return None
            for finish in finishes:
                self.finishes.append(finish)
                if finish.index >= 0:  # (-1: the request's usage, after its rows ended)
                    self._finish(job.first_row + finish.index, finish)
        return None

    def _push(self, job: Job, token: Token) -> None:
        row = job.first_row + token.index
        if row in self.finished:
            return
        runner = self.runner
        codec = runner.codec
        if isinstance(codec, ServerTokenText):
            codec.learn(token.id, token.raw)
            for alt, raw in token.top_raw.items():
                codec.learn(alt, raw)
        kid = self.kids.get(row)
        if kid is None:
            if self.first_token is None:
                self.first_token = time.perf_counter()
            seed = job.seed
            kid = self.writer.new_child(self.request.node, self.request.sampling.as_dict(), seed)
            self.kids[row] = kid
            self.streams[row] = StreamDecoder(codec)
            self.counts[row] = 0
        self.writer.push(kid, token.id, token.logprob, token.top)
        self.last_sign = time.monotonic()
        self.counts[row] += 1
        job.tokens += 1
        if self.request.on_token is not None:
            self.request.on_token(kid, token.id, self.streams[row].push(token.id))
        if token.id in runner.eos_ids or self.counts[row] >= self.max_new:
            self.finished.add(row)

    def _finish(self, row: int, finish: Finish) -> None:
        self.finished.add(row)
        kid = self.kids.get(row)
        if finish.reason == "eos" and kid is not None and kid.tokens:
            # The server stopped on an end-of-generation token: it is one now.
            runner = self.runner
            if kid.tokens[-1] not in runner.eos_ids:
                runner.eos_ids = runner.eos_ids | {kid.tokens[-1]}

    def _explain(self, job: Job, exc: BaseException) -> BaseException:
        if isinstance(exc, ServerUnreachable) and self.kids:
            return ServerStreamCut(
                f"the server at {self.runner.url} went away after {self._streamed()} "
                "token(s), which are kept",
                self.runner.url,
            )
        if isinstance(exc, ServerError) and job.tokens and "kept" not in str(exc):
            return type(exc)(f"{exc} (after {self._streamed()} token(s), which are kept)", exc.url)
        return exc

    def _silent(self) -> ServerTimeout:
        url = self.runner.url
        streamed = self._streamed()
        said = (
            f"after {streamed} token(s), which are kept" if streamed else "before the first token"
        )
        return ServerTimeout(
            f"the server at {url} sent no token for {self.token_deadline:g} s {said} "
            "(pings and progress do not count)",
            url,
        )

    def _cut(self, job: Job) -> ServerStreamCut:
        url = self.runner.url
        if self._streamed():
            said = f"after {self._streamed()} token(s), which are kept"
        else:
            said = "before the first token"
        return ServerStreamCut(
            f"the server at {url} ended the stream {said}: it stopped or restarted", url
        )

    def _streamed(self) -> int:
        return sum(len(kid.tokens) for kid in self.kids.values())

    def _report(self) -> None:
        """Record what the server counted for this generation (for the bench)."""
        if not self.finishes:
            return
        prompt_n = [f.prompt_n for f in self.finishes if f.prompt_n is not None]
        cached = [f.cached for f in self.finishes if f.cached is not None]
        total = Finish(
            0,
            "done",
            prompt_n=sum(prompt_n) if prompt_n else None,
            cached=max(cached) if cached else None,
        )
        first = None if self.first_token is None else self.first_token - self.start
        self.runner.record_exchange(
            "decode", len(self.prompt), total, time.perf_counter() - self.start, first
        )
