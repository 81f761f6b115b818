"""What memory and a moving author's note cost, in tokens the model really runs.

A loom user with memory and an author's note writes in rounds: the model continues
(``new`` tokens), the user starts a new line and types one; the note, a few lines
from the end, moves down a line every round. Each round's cost is what bringing the
new text in takes (the user's line appended, which is when loomterm prefills), against
the baseline of recomputing the whole sequence the model sees, as a front end that
re-sends the assembled prompt without a prefix cache would. Tokens are counted with a
forward hook on the model's input embeddings, not the runner's own counter; seconds
are timed against ``full_recompute`` of the same sequence, in the same run. The last
round's logits are checked against that recompute.

Memory: ``branches`` siblings generated under a memory, then visited in turn twice:
how often the memory was computed, and the tokens every visit cost against
recomputing memory and branch each time. (Switching the memory off frees its KV, so
switching it on again computes it once more.)
"""

from __future__ import annotations

from loomterm.bench.common import full_recompute, make_loom
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import median, timed

CONTEXT = "Memory and author's note"
CONTEXT_NOTE = (
    "tokens the model runs per round with memory and a moving author's note; "
    "baseline: recomputing the whole context"
)
DEPTH = 3


class _Count:
    """Tokens through the input embeddings (every forward pass, prefill or step)."""

    def __init__(self, model) -> None:
        self.tokens = 0
        self._handle = model.get_input_embeddings().register_forward_hook(self._hook)

    def _hook(self, module, inputs, output) -> None:
        self.tokens += inputs[0].shape[-1]

    def close(self) -> None:
        self._handle.remove()


def context_rows(loaded, corpus: list[int], rounds: int, new: int, branches: int, log):
    log(f"memory and a moving author's note: {rounds} rounds of {new} tokens")
    return [*_note_rounds(loaded, corpus, rounds, new, log), _memory_branches(loaded, corpus, branches, new)]  # fmt: skip


def _lines(loom, corpus: list[int], count: int) -> list[str]:
    """``count`` typed lines from the corpus, a dozen tokens each."""
    return [loom.decode(corpus[300 + 12 * i : 312 + 12 * i]).replace("\n", " ") for i in range(count)]  # fmt: skip


def _note_rounds(loaded, corpus, rounds, new, log) -> list[Row]:
    loom = make_loom(loaded)
    memory = loom.decode(corpus[:120])
    loom.update_settings(memory=memory, authors_note="[Style: a slow, quiet story.]", authors_note_depth=DEPTH)  # fmt: skip
    tip = loom.append(loom.root, loom.decode(corpus[120:300]))
    count = _Count(loaded.model)
    spent, whole, ours, theirs = [], [], [], []
    try:
        for line in _lines(loom, corpus, rounds):
            tip = loom.generate(tip, new, temperature=0.0)[0]
            before = count.tokens
            took, tip = timed(
                loaded.device, lambda tip=tip, line=line: loom.append(tip, "\n" + line)
            )
            spent.append(count.tokens - before)
            seen = loom.context_tokens(tip)
            whole.append(len(seen))
            ours.append(took)
            theirs.append(timed(loaded.device, lambda seen=seen: full_recompute(loaded, seen))[0])
        logits = loom.next_logits(tip)
        want = full_recompute(loaded, loom.context_tokens(tip)).float()
        error = float((logits - want).abs().max() / want.abs().max())
    finally:
        count.close()
    per_round, context = sum(spent) / len(spent), sum(whole) / len(whole)
    log(f"  {per_round:.0f} of {context:.0f} context tokens per round, error {error:.1e}")
    extra = {"tokens_per_round": spent, "context_tokens": whole, "relative_error": error}
    return [
        Row(
            CONTEXT,
            f"tokens per round, note {DEPTH} lines up (x{rounds})",
            context,
            per_round,
            "tokens",
            ratio(per_round, context),
            note="cost: recomputed / whole context",
            extra=extra,
        ),  # fmt: skip
        Row(
            CONTEXT,
            f"seconds per round, note {DEPTH} lines up (x{rounds})",
            median(theirs),
            median(ours),
            "s",
            ratio(median(theirs), median(ours)),
            note="speed-up over a recompute",
        ),  # fmt: skip
    ]


def _memory_branches(loaded, corpus, branches, new) -> Row:
    loom = make_loom(loaded)
    memory_tokens = corpus[:200]
    loom.update_settings(memory=loom.decode(memory_tokens))
    count = _Count(loaded.model)
    try:
        prompt = loom.append(loom.root, loom.decode(corpus[200:260]))
        kids = loom.generate(prompt, new, n=branches, temperature=1.0, seed=7)
        memory = len(loom.context_tokens(prompt)) - prompt.end
        spent = baseline = 0
        visits = [*kids, *kids]
        # Every visit at most the branch's own tokens, the way back its whole path.
        branch_only = sum(len(kid.tokens) for kid in visits) + kids[-1].end
        for kid in visits:
            before = count.tokens
            loom.next_logits(kid)
            spent += count.tokens - before
            baseline += len(loom.context_tokens(kid))
    finally:
        count.close()
    return Row(
        CONTEXT,
        f"memory of {memory} tokens, {len(visits)} visits to {branches} branches",
        baseline,
        spent,
        "tokens",
        ratio(spent, baseline),
        note=f"visits ran {spent} tokens, the branches alone hold {branch_only}: the memory ran once",
        extra={
            "memory_tokens": memory,
            "branch_tokens": branch_only,
            "memory_ran_once": spent <= branch_only,
        },
    )
