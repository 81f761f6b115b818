"""Edit latency and re-rope quality.

Edit latency is the time from an operation to the next-token logits of its result,
against one forward pass over the result's whole path (what a stateless frontend
does). Re-rope quality compares next-token distributions after a fast splice (suffix
keys re-rotated), and after a splice whose suffix keys are not re-rotated at all,
with an exact splice (suffix recomputed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from loomterm.bench.common import full_recompute, make_loom
from loomterm.bench.report import Row, ratio, speedup
from loomterm.bench.timing import median, percentile, timed
from loomterm.engine import Loom, Node
from loomterm.engine.events import Event
from loomterm.engine.kv.window import segments
from loomterm.tree import Origin

TAIL = 32  # tokens of each branch below the shared prefix
TARGET_LENGTH = 2000  # the speed targets are set at this path length
FLAT_OPS = ("truncate", "branch switch to a cached sibling", "alternative pick")

LATENCY = "Edit latency"
LATENCY_NOTE = "time until next-token logits; baseline: full recompute of the resulting path"
REROPE = "Re-rope quality"
REROPE_NOTE = (
    "next-token distributions vs an exact splice; baseline: suffix KV copied without re-rotation"
)


@dataclass
class EditOp:
    """One edit, measured ``reps`` times: ``run(r)`` performs repetition ``r`` (after
    the working cache was put back on the main branch) and returns the node whose
    logits are then read."""

    name: str
    target: str
    run: Callable[[int], Node]


def edit_latency(
    loaded, corpus: list[int], lengths: list[int], reps: int, base_reps: int, log
) -> list[Row]:
    rows: list[Row] = []
    for length in lengths:
        log(f"edit latency at {length} tokens")
        rows += _latency_at(loaded, corpus, length, reps, base_reps)
    if len(lengths) > 1:
        rows += _flatness(rows, min(lengths), max(lengths))
    return rows


def _flatness(rows: list[Row], short: int, long: int) -> list[Row]:
    """How much the cheap edits slow down as the path grows: loomterm's time at the
    longest length over its time at the shortest (flat is 1x; a recompute grows ~8x)."""
    out = []
    for op in FLAT_OPS:
        a = next(r for r in rows if r.name == f"{op} @{short}")
        b = next(r for r in rows if r.name == f"{op} @{long}")
        out.append(
            Row(
                LATENCY,
                f"{op}: growth {short} -> {long}",
                a.loomterm,
                b.loomterm,
                "ms",
                ratio(b.loomterm, a.loomterm),
                "<=2",
                note=f"recompute grew {ratio(b.baseline, a.baseline):.1f}x",
            )
        )
    return out


def _latency_at(loaded, corpus: list[int], length: int, reps: int, base_reps: int) -> list[Row]:
    loom = make_loom(loaded)
    prefix = loom.append_tokens(loom.root, corpus[: length - TAIL])
    main = loom.append_tokens(prefix, corpus[length - TAIL : length])  # the document
    other = loom.append_tokens(prefix, _far(corpus, length, TAIL))  # a cached sibling
    main_tokens = loom.tokens(main)
    picks = _runner_up_picks(loom, main, main_tokens, length, reps)
    middle = length // 2

    def replacement(position: int) -> list[int]:
        token = corpus[(position * 7 + 11) % len(corpus)]
        return [token if token != main_tokens[position] else (token + 1) % loom.runner.vocab_size]

    ops = [
        EditOp("truncate", ">=40", lambda r: loom.truncate(main, length - 8 - r)),
        EditOp("branch switch to a cached sibling", ">=40", lambda r: other),
        EditOp("alternative pick", ">=40", lambda r: loom.pick(main, *picks[r])),
        EditOp(
            "fast splice mid",
            ">=10",
            lambda r: loom.splice_tokens(
                main, middle + r, middle + r + 1, replacement(middle + r), exact=False
            ),
        ),
        EditOp(
            "exact splice mid",
            "",
            lambda r: loom.splice_tokens(
                main,
                middle + 3 * reps + r,
                middle + 3 * reps + r + 1,
                replacement(middle + 3 * reps + r),
                exact=True,
            ),
        ),
        EditOp(
            "append 10 tokens",
            "",
            lambda r: loom.append_tokens(main, _far(corpus, length + 97 * (r + 1), 10)),
        ),
    ]
    return [_op_row(loaded, loom, main, op, length, reps, base_reps) for op in ops]


def _runner_up_picks(
    loom: Loom, main: Node, main_tokens: list[int], length: int, reps: int
) -> list[tuple[int, int]]:
    """Real alternatives for the picks: the runner-up token at each picked position."""
    picks = []
    for r in range(reps):
        position = length - 4 - r
        top = loom.next_logits(loom.truncate(main, position)).topk(2).indices.tolist()
        picks.append((position, top[1] if top[0] == main_tokens[position] else top[0]))
    return picks


def _op_row(
    loaded, loom: Loom, main: Node, op: EditOp, length: int, reps: int, base_reps: int
) -> Row:
    """``op`` timed ``reps`` times on the document ``main``, against recomputing the
    path it leaves from scratch."""
    device = loom.runner.device
    times, result = [], None
    for r in range(reps):
        loom.next_logits(main)  # the working cache holds the document, as after typing
        seconds, result = timed(device, lambda r=r: _logits_of(loom, op.run(r)))
        times.append(seconds)
    path = loom.tokens(result)
    base = [timed(device, lambda: full_recompute(loaded, path))[0] for _ in range(base_reps)]
    return Row(
        LATENCY,
        f"{op.name} @{length}",
        median(base) * 1e3,
        median(times) * 1e3,
        "ms",
        speedup(median(base), median(times)),
        op.target if length >= TARGET_LENGTH else "",
        extra={"length": length, "result_length": len(path), "loom_s": times},
    )


def _logits_of(loom: Loom, node: Node) -> Node:
    loom.next_logits(node)
    return node


def _far(corpus: list[int], start: int, count: int) -> list[int]:
    """``count`` corpus tokens from ``start`` on, wrapping around."""
    return [corpus[(start + i) % len(corpus)] for i in range(count)]


# -- re-rope quality -------------------------------------------------------------------------
# (position as a fraction of the document, tokens deleted, tokens inserted)
EDITS = [
    (0.10, 1, 1),
    (0.20, 3, 0),
    (0.30, 0, 4),
    (0.40, 2, 2),
    (0.50, 8, 1),
    (0.60, 1, 12),
    (0.70, 5, 5),
    (0.80, 0, 1),
]
POINTS = (0.25, 0.5, 0.75, 1.0)  # where in the moved suffix the next token is predicted


def rerope_quality(loaded, corpus: list[int], doc_len: int, edits: int, log) -> list[Row]:
    log(f"re-rope quality over {edits} edits of a {doc_len}-token document")
    loom = make_loom(loaded)
    if not loom.capabilities.rerope:
        nan = float("nan")
        note = "absolute positions: splices always recompute"
        return [Row(REROPE, name, nan, nan, "", nan, note=note) for name in _REROPE_ROWS]
    doc = loom.append_tokens(loom.root, corpus[:doc_len])
    doc_tokens = loom.tokens(doc)
    kl_fast, kl_plain, top_fast, top_plain = [], [], [], []
    for i, (where, deleted, inserted) in enumerate(EDITS[:edits]):
        start = int(where * doc_len)
        end = start + deleted
        new = _far(corpus, doc_len + 53 * (i + 1), inserted)
        if new == doc_tokens[start:end]:
            new = [(t + 1) % loom.runner.vocab_size for t in new]
        fast = loom.splice_tokens(doc, start, end, new, exact=False)
        exact = loom.splice_tokens(doc, start, end, new, exact=True)
        plain = splice_unrotated(loom, doc, start, end, new)
        moved = start + len(new)
        for point in POINTS:
            at = moved + max(1, round(point * (fast.end - moved)))
            want = _logprobs(loom, exact, at)
            for node, kls, tops in ((fast, kl_fast, top_fast), (plain, kl_plain, top_plain)):
                got = _logprobs(loom, node, at)
                kls.append(float((want.exp() * (want - got)).sum()))
                tops.append(float(got.argmax() == want.argmax()))
    agree_fast = 100 * sum(top_fast) / len(top_fast)
    agree_plain = 100 * sum(top_plain) / len(top_plain)
    extra = {"samples": len(kl_fast), "kl_fast": kl_fast, "kl_no_rerotation": kl_plain}
    mean_fast, mean_plain = sum(kl_fast) / len(kl_fast), sum(kl_plain) / len(kl_plain)
    p90_fast, p90_plain = percentile(kl_fast, 0.9), percentile(kl_plain, 0.9)
    return [
        Row(REROPE, "KL(exact||x) mean", mean_plain, mean_fast, "nats",
            ratio(mean_plain, mean_fast), note="ratio: times lower", extra=extra),
        Row(REROPE, "KL(exact||x) p90", p90_plain, p90_fast, "nats",
            ratio(p90_plain, p90_fast), note="ratio: times lower"),
        Row(REROPE, "top-1 agreement with exact", agree_plain, agree_fast, "%",
            ratio(agree_fast, agree_plain)),
    ]  # fmt: skip


_REROPE_ROWS = ("KL(exact||x) mean", "KL(exact||x) p90", "top-1 agreement with exact")


def _logprobs(loom: Loom, node: Node, length: int) -> torch.Tensor:
    """(V,) float32 next-token log-probabilities after the first ``length`` tokens."""
    return loom.next_logits(loom.truncate(node, length)).float().log_softmax(-1)


def splice_unrotated(loom: Loom, node: Node, start: int, end: int, tokens: list[int]) -> Node:
    """Like a fast splice, but the suffix's KV is copied with its keys still rotated for
    their old positions: what re-rope corrects. Bench and tests only."""
    total = node.end
    prefix = loom.truncate(node, start)
    suffix = segments(node, end, total)
    tail = loom.append_tokens(prefix, list(tokens), Origin.EDIT) if tokens else prefix
    for source, lo, hi in suffix:
        copy = loom.tree.add(tail, source.tokens[lo:hi], source.origin)
        copy.kv = source.kv[:, :, :, lo:hi].clone()  # (L, 2, H, T, D), keys not moved
        copy.approx = True
        loom.notify(Event.ADD, copy)
        tail = copy
    loom.next_logits(tail)
    return tail
