"""Long documents: opening a long session, and branch switches past the context window.

- Open and first token: a session whose path holds ``length`` imported tokens (no KV
  snapshot, no per-token records yet) is opened fresh and asked for one greedy token;
  loomterm reads the path in chunks, keeps every token's log-probability and top-10,
  and shows progress. Baseline: one plain transformers forward of the same window
  (``model(input_ids)`` on the model freshly loaded by transformers, all logits, as a
  user of transformers runs it), then its argmax. Same model, dtype and threads.
- Window switches: two siblings at the end of a path longer than ``n_ctx``. In the
  same window the switch computes only the sibling's own tokens (exact); across a
  window shift the columns already held are re-rotated (approximate, flagged, as a
  fast splice is; the note gives the KL to the exact window). Baseline: a recompute
  of the target's window.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from loomterm.bench.common import fresh_transformers, full_recompute, make_loom
from loomterm.bench.report import Row, speedup
from loomterm.bench.timing import median, timed
from loomterm.engine.sample.chain import token_record_tensor, unpack_token_records
from loomterm.tree import Origin

LONG = "Long documents"
LONG_NOTE = (
    "opening a long session, switching branches past n_ctx; baselines: a plain "
    "transformers forward of the same window"
)
TAIL = 32  # tokens of each sibling below the shared prefix


def _far(corpus: list[int], start: int, count: int) -> list[int]:
    """``count`` corpus tokens from ``start`` on, wrapping around."""
    return [corpus[(start + i) % len(corpus)] for i in range(count)]


def _window_tokens(loom, tokens: list[int]) -> list[int]:
    window = loom.runner.window
    shift = window.shift_for(len(tokens))
    return tokens if not shift else tokens[: window.n_keep] + tokens[window.n_keep + shift :]


@torch.inference_mode()
def plain_forward(model, tokens: list[int]) -> torch.Tensor:
    """A plain transformers forward of ``tokens`` on a freshly loaded ``model``
    (``fresh_transformers``): every position's logits, (T, V)."""
    ids = torch.tensor([tokens], device=model.device)  # (1, T)
    return model(input_ids=ids).logits[0]  # (T, V)


@torch.inference_mode()
def _records(logits: torch.Tensor, tokens: list[int]):
    """Every token's log-probability and top alternatives from ``logits`` (T, V), as a
    session saved by loomterm stores them (the first token has none)."""
    chosen = torch.tensor(tokens[1:], device=logits.device)  # (T-1,)
    predicted = logits[:-1]  # (T-1, V): row i predicts token i + 1
    rows = [
        token_record_tensor(predicted[lo : lo + 256], chosen[lo : lo + 256])
        for lo in range(0, len(tokens) - 1, 256)
    ]
    _, logprobs, top = unpack_token_records(torch.cat(rows).tolist())
    return [None, *logprobs], [None, *top]


def _timed_cpu(device, fn):
    """``timed``, plus the process's CPU seconds: on a machine shared with other jobs
    the CPU time of a one-thread run moves far less than the wall clock."""
    start = time.process_time()
    took, result = timed(device, fn)
    return took, time.process_time() - start, result


def open_first_token(loaded, corpus: list[int], length: int, reps: int, log) -> list[Row]:
    """Open a saved session with a ``length``-token path and take one greedy token,
    against a plain forward of the window; a fresh open per repetition. Two sessions:
    one saved by loomterm (every token's records stored: the read keeps only the last
    logits) and one imported (no records: the read computes them all)."""
    log(f"open a session with a {length:,}-token path, first token")
    with fresh_transformers(loaded) as plain:
        return _open_first_token(loaded, plain, corpus, length, reps)


def _open_first_token(loaded, plain, corpus: list[int], length: int, reps: int) -> list[Row]:
    from loomterm.sessions.session import Session

    tokens = _far(corpus, 0, length)
    seconds: dict[str, list[float]] = {"base": [], "saved": [], "imported": []}
    cpu: dict[str, list[float]] = {"base": [], "saved": [], "imported": []}
    same = {}
    with tempfile.TemporaryDirectory() as folder:
        paths = {kind: Path(folder) / f"{kind}.loom" for kind in ("saved", "imported")}
        loom = make_loom(loaded)
        n_ctx, kv_budget = loom.n_ctx, loom.runner.kv_budget
        window = _window_tokens(loom, tokens)
        first = None
        for rep in range(reps):
            took, used, logits = _timed_cpu(loaded.device, lambda: plain_forward(plain, window))
            seconds["base"].append(took)
            cpu["base"].append(used)
            first = int(logits[-1].argmax())
            if rep == 0:  # the sessions, the saved one with the baseline's own records
                del loom
                records = _records(logits, window) if window == tokens else (None, None)
                _write_sessions(loaded, paths, tokens, *records)
            del logits
            for kind, path in paths.items():

                def open_and_generate(path=path):
                    session = Session.open(path, loaded=loaded, n_ctx=n_ctx, kv_budget=kv_budget)
                    opened = session.loom
                    kid = opened.generate(opened.cursor, 1, temperature=0.0, drafting="off")[0]
                    return session, kid

                took, used, (session, kid) = _timed_cpu(loaded.device, open_and_generate)
                seconds[kind].append(took)
                cpu[kind].append(used)
                same[kind] = kid.tokens[0] == first
                session.close()
    return _open_rows(seconds, cpu, same, length, len(window))


def _write_sessions(loaded, paths: dict[str, Path], tokens: list[int], logprobs, top) -> None:
    """The two sessions of ``tokens``: ``saved`` with the given records, as loomterm
    writes them, and ``imported`` without (records computed while reading)."""
    from loomterm.sessions.session import Session

    for kind, path in paths.items():
        loom = make_loom(loaded)
        records = {"logprobs": logprobs, "top": top} if kind == "saved" else {}
        origin = Origin.USER if kind == "saved" else Origin.IMPORT
        loom.cursor = loom.tree.add(loom.root, tokens, origin, **records)
        Session.create(loom, path).close()


def _open_rows(seconds: dict, cpu: dict, same: dict, length: int, read: int) -> list[Row]:
    """A row per session kind: opening it and its first token, against the plain
    forward over the ``read`` tokens of its window."""
    base = median(seconds["base"])
    rows = []
    for kind, what in (
        ("saved", "saved by loomterm (records stored)"),
        ("imported", "imported (records computed while reading)"),
    ):
        mine = median(seconds[kind])
        by_cpu = speedup(median(cpu["base"]), median(cpu[kind]))
        rows.append(
            Row(
                LONG,
                f"open a {length:,}-token session {what}, first token",
                base,
                mine,
                "s",
                speedup(base, mine),
                ">=1.0",
                note=f"{read:,} tokens read; by CPU time {by_cpu:.2f}x; same token: {same[kind]}",
                extra={
                    "loom_s": seconds[kind],
                    "baseline_s": seconds["base"],
                    "loom_cpu_s": cpu[kind],
                    "baseline_cpu_s": cpu["base"],
                },
            )
        )
    return rows


def window_switch(
    loaded, corpus: list[int], length: int, n_ctx: int | None, reps: int, log, why: str = ""
) -> list[Row]:
    """Switch between siblings at the end of a ``length``-token path, in the same
    window and across a window shift, against a recompute of the target's window.
    ``n_ctx`` None: the model's; ``why`` says in the row names why it is smaller."""
    loom = make_loom(loaded, n_ctx=n_ctx)
    n_ctx = loom.n_ctx
    window = loom.runner.window
    log(f"branch switches at {length:,} tokens past n_ctx {n_ctx:,}")
    rows = []
    # In one window: both siblings end at ``length``.
    prefix = loom.append_tokens(loom.root, _far(corpus, 0, length - TAIL))
    main = loom.append_tokens(prefix, _far(corpus, length - TAIL, TAIL))
    other = loom.append_tokens(prefix, _far(corpus, length + 500, TAIL))
    rows.append(_switch_row(loom, loaded, main, other, reps, "same window", why))
    # Across a shift: ``main`` ends on the last shift boundary at or below ``length``
    # (the window's last token), ``other`` 16 tokens later, in the next window.
    blocks = max(0, (length - n_ctx) // window.n_discard)
    edge = n_ctx + blocks * window.n_discard
    loom = make_loom(loaded, n_ctx=n_ctx)
    prefix = loom.append_tokens(loom.root, _far(corpus, 0, edge - 16))
    main = loom.append_tokens(prefix, _far(corpus, edge - 16, 16))
    other = loom.append_tokens(prefix, _far(corpus, edge + 500, 32))
    rows.append(_switch_row(loom, loaded, main, other, reps, "across a window shift", why))
    return rows


def _switch_row(loom, loaded, main, other, reps: int, how: str, why: str) -> Row:
    device = loom.runner.device
    times = []
    got = None
    if not loom.is_exact(other):
        loom.refresh(other)  # exact, whatever the setup's appends re-rotated
    for _ in range(reps):
        # The working cache holds ``main``'s exact window (appending it past a shift
        # boundary may have re-rotated the prefix; refresh recomputes exactly).
        if not loom.is_exact(main):
            loom.refresh(main)
        loom.next_logits(main)
        seconds, got = timed(device, lambda: loom.next_logits(other))
        times.append(seconds)
    window = _window_tokens(loom, loom.tokens(other))
    base, want = [], None
    for _ in range(reps):
        seconds, want = timed(device, lambda: full_recompute(loaded, window))
        base.append(seconds)
    want_lp, got_lp = want.float().log_softmax(-1), got.float().log_softmax(-1)
    kl = float((want_lp.exp() * (want_lp - got_lp)).sum())
    exact = loom.is_exact(other)
    note = f"{'exact' if exact else 'approx'}; KL to the exact window {kl:.2g} nats"
    return Row(
        LONG,
        f"branch switch @{other.end:,}, {how}, n_ctx {loom.n_ctx:,}{why}",
        median(base) * 1e3,
        median(times) * 1e3,
        "ms",
        speedup(median(base), median(times)),
        ">=10",
        note=note,
        extra={"window": len(window), "exact": exact, "kl": kl, "loom_s": times},
    )
