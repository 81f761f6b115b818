"""The plain decoder: ``n`` continuations sampled as one batch over one shared prefix.

Every sampled token is fed back in the same step, so each child ends with its KV
complete and its next-token logits known. Rows that hit an end-of-sequence token stop
growing; they keep being fed (their columns are ignored) so the batch stays
rectangular. Children are created when their first token arrives, so a generation
cancelled at once leaves no empty nodes.

One step costs one forward pass and one host transfer: the chosen tokens, their
log-probabilities and the top alternatives travel together
(``sample.chain.token_record_tensor``); the tokens fed back stay on the device. Nothing a
step does grows with the path: the history the penalties read is a preallocated
buffer written in place. (Sampled, not greedy, steps also bring the distribution to
the host for the per-row CPU generators' draw: ``sample.chain.draw``.)
"""

from __future__ import annotations

import torch

from loomterm.engine.decode.job import DecodeJob
from loomterm.engine.generation import GenerateResult
from loomterm.engine.sample.chain import (
    make_generators,
    sample_step,
    token_record_tensor,
    unpack_token_records,
)
from loomterm.engine.sample.healing import HealState
from loomterm.engine.sample.history import history_view


def plain_decode(job: DecodeJob) -> GenerateResult:
    """Decode ``job.request``; ``job.logits`` (V,) follow the parent's path, which the
    working cache's row 0 holds. On return the cache holds the first child's path (or
    the parent's, when nothing was generated) and remembers the logits after it."""
    batch = _Batch(job)
    for step in range(job.request.max_new_tokens):
        # Healing ends first, even when cancelled: the typed text comes out whole.
        if (job.request.cancelled and not batch.heal.pending) or not batch.step(step):
            break
    return batch.result()


class _Batch:
    """The ``n`` rows of one plain generation, step by step (``plain_decode``)."""

    def __init__(self, job: DecodeJob) -> None:
        request, work = job.request, job.work
        self.job, self.request, self.work, self.kv = job, request, work, job.kv
        self.n, self.params = request.n, request.sampling
        self.logits = job.logits[None].expand(self.n, -1)  # (n, V)
        self.base = work.length  # columns of the shared prefix
        self.plain = job.keeps_kv  # KV can be kept on a child only while this holds
        work.fork(self.n, columns=work.length + request.max_new_tokens)
        self.generators = make_generators(request.seed, self.n)
        self.streams = [job.stream() for _ in range(self.n)]
        self.state = job.sampler(self.n)
        self.history = job.history(self.n)  # (n, T + new), written in place
        self.kids: list = []
        self.finished = [False] * self.n
        self.stored = [0] * self.n
        self.fed = torch.zeros(self.n, dtype=torch.long, device=job.device)  # (n,)
        self.stopped: torch.Tensor | None = None  # (n,) bool on the device, once a row stopped
        self.row0_cols = -1  # columns of row 0 once it stopped; -2: rebuilt by a window shift
        self.heal = HealState.start(request.heal, self.n)  # typed text the first tokens spell

    def step(self, step: int) -> bool:
        """Sample a token for every row, hand it to its child and feed it back.
        Returns whether the generation goes on."""
        chosen, live = self._sample(self.request.max_new_tokens - step)
        job, work, kv, finished = self.job, self.work, self.kv, self.finished
        if work.length >= job.n_ctx and kv.assembled is not None:
            if all(finished):
                self.row0_cols = -2  # the last tokens were not fed: the next ensure does it
                return False
            # Full under an injected context: re-assemble for the longer path (memory on
            # top, the note at its depth, the oldest document tokens dropped) and
            # recompute it after the kept prefix, exactly; the pending tokens are in it.
            self.logits = kv.refill(self.kids, [not done for done in finished])  # (n, V)
            if finished[0] or self.row0_cols >= 0:
                self.row0_cols = -2  # row 0 now holds a live row's sequence
        else:
            self._feed(live)
        if self.plain:
            for row, kid in enumerate(self.kids):
                if live[row]:
                    self.stored[row] = len(kid.tokens)
        if self.history is not None:
            self.history.push(chosen)
        return not all(finished)

    def _sample(self, left: int) -> tuple[torch.Tensor, list[bool]]:
        """Draw every row's token, give the live rows' tokens to their children, and
        set what is fed next. Returns the tokens drawn (n,) and which rows were live."""
        job, request, finished = self.job, self.request, self.finished
        history = history_view(self.history)
        allowed = self.heal.constrain(self.logits, left)  # (n, V): healing's mask, if any
        chosen, self.state = sample_step(allowed, self.params, self.generators, history, self.state)
        records = token_record_tensor(allowed, chosen)  # (n, 22), on the device
        picks, logprobs, alternatives = unpack_token_records(records.tolist())  # the transfer
        alternatives, self.heal = self.heal.alternatives(alternatives), self.heal.after(picks)
        if not self.kids:
            sampling = self.params.as_dict()
            self.kids = [
                job.writer.new_child(request.node, sampling, request.seed) for _ in range(self.n)
            ]
        live = [not done for done in finished]
        newly_stopped = False
        for row, kid in enumerate(self.kids):
            if finished[row]:
                continue
            token = picks[row]
            job.emit(kid, token, logprobs[row], alternatives[row], self.streams[row])
            if token in job.eos_ids:
                finished[row] = True
                newly_stopped = True
        # A stopped row keeps being fed its last token (its columns are ignored).
        self.fed = chosen if self.stopped is None else torch.where(self.stopped, self.fed, chosen)
        if newly_stopped:
            self.stopped = torch.tensor(finished, device=job.device)
        return chosen, live

    def _feed(self, live: list[bool]) -> None:
        """One decode step over the rows (after a window shift when the cache is full)."""
        job, work, kids = self.job, self.work, self.kids
        if work.length >= job.n_ctx:
            self._shift()
        out = job.decode_step(self.fed)  # (n, 1, V)
        work.commit(1, kids[0] if live[0] else None, len(kids[0].tokens) - 1)
        self.logits = out[:, -1]  # (n, V)
        if live[0] and self.finished[0]:
            self.row0_cols = work.length

    def _shift(self) -> None:
        """Slide the context window; the children's KV is theirs no longer (approximate
        where the model re-rotates)."""
        job, kids = self.job, self.kids
        if self.plain:  # hand the children their KV before the shift moves the columns
            self.kv.store_generated(kids, self.base, self.stored)
            self.stored = [0] * self.n
        self.kv.shift_window(self.request.node, kids, self.fed)
        self.plain = False
        if self.row0_cols >= 0:
            self.row0_cols = -2
        for kid in kids:
            if job.model.rerotates:
                job.writer.mark_approx(kid)

    def result(self) -> GenerateResult:
        """The children, their KV handed over, and the logits after row 0 where known."""
        kids, row0_cols = self.kids, self.row0_cols
        if not kids:  # nothing was generated: the cache still holds the parent
            return self.job.nothing(self.base)
        valid = row0_cols == -1 and len(kids[0].tokens) > 0
        cut = {-1: None, -2: 0}.get(row0_cols, row0_cols)
        logits = self.logits[0] if valid else None
        return self.job.finish(kids, self.base, self.stored, logits, cut=cut)
