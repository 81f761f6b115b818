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
    request, writer, work, kv = job.request, job.writer, job.work, job.kv
    parent, n, params = request.node, request.n, request.sampling
    logits = job.logits[None].expand(n, -1)  # (n, V)
    base = work.length  # columns of the shared prefix
    plain = job.keeps_kv  # KV can be kept on a child only while this holds
    work.fork(n, columns=work.length + request.max_new_tokens)
    generators = make_generators(request.seed, n)
    streams = [job.stream() for _ in range(n)]
    state = job.sampler(n)
    history = job.history(n)  # (n, T + new), written in place
    kids: list = []
    finished = [False] * n
    stored = [0] * n
    fed = torch.zeros(n, dtype=torch.long, device=job.device)  # (n,)
    stopped: torch.Tensor | None = None  # (n,) bool on the device, once a row has stopped
    row0_cols = -1  # columns of row 0 once it stopped; -2: rebuilt by a window shift
    heal = HealState.start(request.heal, n)  # typed text the first tokens spell again
    for step in range(request.max_new_tokens):
        if request.cancelled and not heal.pending:  # healing ends first: the text is whole
            break
        allowed = heal.constrain(logits, request.max_new_tokens - step)  # (n, V)
        chosen, state = sample_step(allowed, params, generators, history_view(history), state)
        records = token_record_tensor(allowed, chosen)  # (n, 22), on the device
        picks, logprobs, alternatives = unpack_token_records(records.tolist())  # the transfer
        alternatives, heal = heal.alternatives(alternatives), heal.after(picks)
        if not kids:
            sampling = params.as_dict()
            kids = [writer.new_child(parent, sampling, request.seed) for _ in range(n)]
        live = [not done for done in finished]
        newly_stopped = False
        for row, kid in enumerate(kids):
            if finished[row]:
                continue
            token = picks[row]
            job.emit(kid, token, logprobs[row], alternatives[row], streams[row])
            if token in job.eos_ids:
                finished[row] = True
                newly_stopped = True
        # A stopped row keeps being fed its last token (its columns are ignored).
        fed = chosen if stopped is None else torch.where(stopped, fed, chosen)
        if newly_stopped:
            stopped = torch.tensor(finished, device=job.device)
        if work.length >= job.n_ctx and kv.assembled is not None:
            if all(finished):
                row0_cols = -2  # the last tokens were not fed: the next ensure does it
                break
            # Full under an injected context: re-assemble for the longer path (memory on
            # top, the note at its depth, the oldest document tokens dropped) and
            # recompute it after the kept prefix, exactly; the pending tokens are in it.
            logits = kv.refill(kids, [not done for done in finished])  # (n, V)
            if finished[0] or row0_cols >= 0:
                row0_cols = -2  # row 0 now holds a live row's sequence
        else:
            if work.length >= job.n_ctx:
                if plain:  # hand the children their KV before the shift moves the columns
                    kv.store_generated(kids, base, stored)
                    stored = [0] * n
                kv.shift_window(parent, kids, fed)
                plain = False
                if row0_cols >= 0:
                    row0_cols = -2
                for kid in kids:
                    if job.model.rerotates:
                        writer.mark_approx(kid)
            out = job.decode_step(fed)  # (n, 1, V)
            work.commit(1, kids[0] if live[0] else None, len(kids[0].tokens) - 1)
            logits = out[:, -1]  # (n, V)
            if live[0] and finished[0]:
                row0_cols = work.length
        if plain:
            for row, kid in enumerate(kids):
                if live[row]:
                    stored[row] = len(kid.tokens)
        if history is not None:
            history.push(chosen)
        if all(finished):
            break
    if not kids:  # nothing was generated: the cache still holds the parent
        return job.nothing(base)
    valid = row0_cols == -1 and len(kids[0].tokens) > 0
    cut = {-1: None, -2: 0}.get(row0_cols, row0_cols)
    return job.finish(kids, base, stored, logits[0] if valid else None, cut=cut)
