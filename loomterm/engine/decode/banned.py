"""Banned phrases with backtracking (koboldcpp's "phrase banning", antislop).

When a continuation's text comes to contain a banned phrase, decoding goes back to the
token where the phrase began and samples that position again with that token
forbidden there. In a loom going back is free: the KV of what is kept is already in
the working cache, so only the one token before the cut is fed again (for its
logits). The output never contains a banned phrase, across token boundaries and with
phrases that share prefixes; taken-back tokens leave the node (and the screen, through
``GenerateRequest.on_take_back``).

Rows are decoded one after another over the shared prefix (a row going back cannot
stay in a batch with rows that do not), each with its own seeded random stream, so a
seed gives each sibling the same text whatever ``n`` is.
"""

from __future__ import annotations

import torch

from loomterm.engine.decode.job import DecodeJob
from loomterm.engine.generation import GenerateResult
from loomterm.engine.sample.chain import make_generators, sample_step, token_records
from loomterm.engine.sample.history import history_view
from loomterm.tree import Node

# A row gives up going back after this many take-backs per requested token (a model
# that keeps finding new ways into a phrase); what it has is kept.
TAKE_BACKS_PER_TOKEN = 4


class PhraseWatch:
    """The text of one continuation, token by token, and where a banned phrase begins.

    ``forbidden[position]`` lists the tokens already taken back at that position.
    """

    def __init__(self, phrases: tuple[str, ...], ignore_case: bool) -> None:
        self.ignore_case = ignore_case
        self.phrases = [self._fold(p) for p in phrases if p]
        self.longest = max((len(p) for p in self.phrases), default=0)
        self.ends: list[int] = []  # text length after each token
        self.text = ""
        self.forbidden: dict[int, set[int]] = {}

    def _fold(self, text: str) -> str:
        return text.casefold() if self.ignore_case else text

    def push(self, piece: str) -> None:
        self.text += self._fold(piece)
        self.ends.append(len(self.text))

    def found(self) -> int | None:
        """The index of the token where a banned phrase that the last token completed
        begins, or None. Only the text the last token could complete is searched."""
        if not self.phrases or not self.ends:
            return None
        before = self.ends[-2] if len(self.ends) > 1 else 0
        lo = max(0, before - self.longest + 1)
        window = self.text[lo:]
        starts = [window.find(p) for p in self.phrases]
        hits = [lo + s for s in starts if s >= 0]
        if not hits:
            return None
        char = min(hits)
        return next(i for i, end in enumerate(self.ends) if end > char)

    def take_back(self, index: int, token: int) -> None:
        """Drop tokens ``index..``; ``token`` may no longer start there."""
        del self.ends[index:]
        self.text = self.text[: self.ends[-1]] if self.ends else ""
        self.forbidden.setdefault(index, set()).add(token)


def banned_decode(job: DecodeJob) -> GenerateResult:
    """Decode ``job.request`` (with ``request.banned``) one row at a time;
    ``job.logits`` (V,) follow the parent's path, which the working cache's row 0
    holds. On return the cache holds the first child's path and remembers the logits
    after it."""
    request, work = job.request, job.work
    base = work.length
    generators = make_generators(request.seed, request.n)
    kids: list[Node] = []
    last_logits = None
    plain = job.keeps_kv  # KV can be kept on a child only while this holds
    for row in range(request.n):
        if request.cancelled:
            break
        work.truncate(base)  # the shared prefix stays; the previous sibling's KV is kept
        generator = None if generators is None else [generators[row]]
        kid, last_logits = _one_row(job, generator, kids)
        if kid is not None:
            job.store([kid], base, [len(kid.tokens) if plain else 0])
    if not kids:
        work.truncate(base)
        return GenerateResult()
    if len(kids) > 1:  # leave the cache on the first child, as the plain decoder does
        job.kv.ensure(kids[0])
    else:
        job.kv.remember(last_logits)
    job.model.enforce_budget([*job.parent.path(), kids[0]])
    return GenerateResult(children=kids)


def _one_row(
    job: DecodeJob, generators, kids: list[Node]
) -> tuple[Node | None, torch.Tensor | None]:
    """One continuation; returns it (None if cancelled before its first token) and the
    (V,) logits after it. It stops at the context window's end (generating again from
    there shifts the window as usual)."""
    request, writer, work = job.request, job.writer, job.work
    parent, params = request.node, request.sampling
    base = work.length
    state = job.sampler(1)
    history = job.history(1)  # (1, T + new): what penalties read, cut on a take-back
    watch = PhraseWatch(request.banned, request.banned_ignore_case)
    stream = job.stream()
    kid: Node | None = None
    logits = job.logits  # (V,) after the parent, then after each kept token
    take_backs = TAKE_BACKS_PER_TOKEN * max(1, request.max_new_tokens)
    while (kid is None or len(kid.tokens) < request.max_new_tokens) and work.length < job.n_ctx:
        if request.cancelled:
            break
        done = len(kid.tokens) if kid is not None else 0
        row = logits[None]  # (1, V)
        if watch.forbidden.get(done):
            row = row.clone()
            row[0, sorted(watch.forbidden[done])] = float("-inf")
        chosen, state = sample_step(row, params, generators, history_view(history), state)
        logprobs, alternatives = token_records(logits[None], chosen)  # the model's own
        token = int(chosen[0])
        if kid is None:
            kid = writer.new_child(parent, request.sampling_record(), request.seed)
            kids.append(kid)
        writer.push(kid, token, logprobs[0], alternatives[0])
        if history is not None:
            history.push(token)
        piece = stream.push(token)
        watch.push(piece)
        start = watch.found()
        if start is not None and take_backs > 0:
            take_backs -= 1
            watch.take_back(start, kid.tokens[start])
            writer.take_back(kid, start)
            if history is not None:
                history.cut(start)
            stream = _stream_after(job, kid.tokens)
            if request.on_take_back is not None:
                request.on_take_back(kid, start)
            logits = _logits_after(job, kid, base)
            continue
        if request.on_token is not None:
            request.on_token(kid, token, piece)
        out = job.forward(chosen[None])  # (1, 1, V): the token is fed at once
        work.commit(1, kid, len(kid.tokens) - 1)
        logits = out[0, -1]
        if token in job.eos_ids:
            break
    return kid, logits


def _stream_after(job: DecodeJob, tokens: list[int]):
    """A stream decoder that has seen ``tokens`` (partial characters held back)."""
    stream = job.stream()
    for token in tokens:
        stream.push(token)
    return stream


def _logits_after(job: DecodeJob, kid: Node, base: int) -> torch.Tensor:
    """Cut the working cache back to the parent plus ``kid``'s kept tokens and return
    the (V,) logits after them: the last kept token is fed again."""
    work = job.work
    kept = len(kid.tokens)
    if kept == 0:
        work.truncate(base)
        return job.logits
    work.truncate(base + kept - 1)
    out = job.forward(torch.tensor([[kid.tokens[-1]]], device=job.device))  # (1, 1, V)
    work.commit(1, kid, kept - 1)
    return out[0, -1]
