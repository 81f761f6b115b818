"""Long documents: opening a long session, and branch switches past the context window.

- Open and first token: a session whose path holds ``length`` imported tokens (no KV
  snapshot, no per-token records yet) is opened fresh and asked for one greedy token;
  loomterm reads the path in chunks, keeps every token's log-probability and top-10,
  and shows progress. Baseline: one plain transformers forward of the same window
  (``model(input_ids)``, stock SDPA attention and weight layout, all logits, as a
  user of transformers would run it), then its argmax. Same model, dtype and threads.
- Window switches: two siblings at the end of a path longer than ``n_ctx``. In the
  same window the switch computes only the sibling's own tokens (exact); across a
  window shift the columns already held are re-rotated (approximate, flagged, as a
  fast splice is; the note gives the KL to the exact window). Baseline: a recompute
  of the target's window.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from loomterm.bench.common import full_recompute, make_loom, stock_attention, stock_layout
from loomterm.bench.report import Row, speedup
from loomterm.bench.timing import median, timed
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
def plain_forward(loaded, tokens: list[int]) -> int:
    """A plain transformers forward of ``tokens`` (all logits), then the greedy token."""
    ids = torch.tensor([tokens], device=loaded.device)  # (1, T)
    with stock_attention(loaded.model), stock_layout(loaded.model):
        logits = loaded.model(input_ids=ids).logits  # (1, T, V)
    return int(logits[0, -1].argmax())


def open_first_token(loaded, corpus: list[int], length: int, reps: int, log) -> list[Row]:
    """Open a saved session with a ``length``-token path and take one greedy token,
    against a plain forward of the window; a fresh open per repetition."""
    from loomterm.session import Session

    log(f"open a session with a {length:,}-token path, first token")
    tokens = _far(corpus, 0, length)
    loom_s, base_s = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "long.loom"
        loom = make_loom(loaded)
        doc = loom.tree.add(loom.root, tokens, Origin.IMPORT)  # read from a file: no KV
        loom.cursor = doc
        Session.create(loom, path).close()
        window = _window_tokens(loom, tokens)
        n_ctx, kv_budget = loom.n_ctx, loom.runner.kv_budget
        del loom, doc
        first = None
        for _ in range(reps):
            took, first = timed(loaded.device, lambda: plain_forward(loaded, window))
            base_s.append(took)

            def open_and_generate():
                session = Session.open(path, loaded=loaded, n_ctx=n_ctx, kv_budget=kv_budget)
                opened = session.loom
                kid = opened.generate(opened.cursor, 1, temperature=0.0, drafting="off")[0]
                return session, kid

            took, (session, kid) = timed(loaded.device, open_and_generate)
            loom_s.append(took)
            same = kid.tokens[0] == first
            session.close()
    base, mine = median(base_s), median(loom_s)
    return [
        Row(
            LONG,
            f"open a {length:,}-token session, first token",
            base,
            mine,
            "s",
            speedup(base, mine),
            ">=1.0",
            note=f"{len(window):,} tokens read, records kept; same token: {same}",
            extra={"loom_s": loom_s, "baseline_s": base_s, "window": len(window)},
        )
    ]


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
    loom.refresh(other)  # exact, whatever the setup's appends re-rotated
    for _ in range(reps):
        # The working cache holds ``main``'s exact window (appending it past a shift
        # boundary may have re-rotated the prefix; refresh recomputes exactly).
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
