"""The weave row: automatic expansion as batched siblings against one request per node.

A weave of ``n=4, d=3, k=2`` from the bench prompt makes 20 nodes of up to ``tokens``
tokens each (4 children of the prompt, then 4 children of each of the 2 kept, twice).
loomterm generates each parent's 4 children as one batch over their shared prefix
(``engine.loom.weave``); the baseline makes the same weave with every node its own request
(``WeaveRequest.batched=False``): the same number of nodes and tokens per node, the same
sampling (T=0.8, seeded) and the same pruning. Each mode runs on a fresh loom, so
neither reuses KV the other left, and drafting is off on both (a one-row request could
otherwise draft from the siblings before it). Repetitions alternate the order of the
modes. The figure is tokens per second over the whole weave, prefill included.
"""

from __future__ import annotations

from loomterm.bench.common import make_loom
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import timed
from loomterm.engine.loom.weave import WeaveRequest, planned_nodes, weave

WEAVE = "Weave"
WEAVE_NOTE = (
    "a weave, its levels as batched siblings; baseline: the same weave, one request per node"
)
TEMPERATURE = 0.8
MODES = ("one request per node", "batched")


def weave_rows(
    loaded, prompt: list[int], n: int, depth: int, keep: int, tokens: int, reps: int, log
) -> list[Row]:
    """One row: the batched weave's tokens per second against the one-at-a-time one."""
    planned = planned_nodes(n, depth, keep)
    log(f"weave: n={n}, d={depth}, k={keep}, {planned} nodes of {tokens} tokens, x{reps}")
    runs = {mode: {"seconds": 0.0, "tokens": 0, "nodes": 0, "requests": 0} for mode in MODES}
    for rep in range(reps):
        order = MODES if rep % 2 == 0 else MODES[::-1]
        for mode in order:
            loom = make_loom(loaded, drafting="off")
            start = loom.append_tokens(loom.root, prompt)
            loom.generate(start, 2, n=2, temperature=TEMPERATURE, seed=0)  # warm-up, untimed
            request = WeaveRequest(
                start,
                n=n,
                depth=depth,
                keep=keep,
                tokens=tokens,
                seed=100 + rep,
                settings={"temperature": TEMPERATURE},
                batched=mode == "batched",
            )
            seconds, result = timed(
                loom.runner.device, lambda loom=loom, request=request: weave(loom, request)
            )
            run = runs[mode]
            run["seconds"] += seconds
            run["tokens"] += result.tokens
            run["nodes"] += len(result.nodes)
            run["requests"] += result.requests
    for run in runs.values():
        run["rate"] = run["tokens"] / run["seconds"] if run["seconds"] > 0 else 0.0
    base, ours = runs[MODES[0]], runs[MODES[1]]
    return [
        Row(
            WEAVE,
            f"n={n}, d={depth}, k={keep}, {tokens} tokens/node",
            base["rate"],
            ours["rate"],
            "tok/s",
            ratio(ours["rate"], base["rate"]),
            note=(
                f"{ours['nodes'] // reps} nodes, {ours['requests'] // reps} requests vs "
                f"{base['requests'] // reps}; {ours['seconds'] / reps:.2f} s vs "
                f"{base['seconds'] / reps:.2f} s per weave"
            ),
            extra={"batched": ours, "one_per_node": base, "reps": reps},
        )
    ]
