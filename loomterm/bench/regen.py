"""The drafted-decoding rows a loom user's work is made of: sampled regenerations.

The headline rows sample as a new session does (``presets.SHIPPED["llama.cpp"]``:
temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, the editor's starting samplers for a
model whose generation_config sets none), with several seeds, and measure drafting
``auto`` against ``off`` on a fresh loom per mode, so no pass drafts from the
continuations another mode's pass left in the tree:

- regenerations from the same point: one earlier sibling, then one regeneration per
  seed (each may draft from the siblings before it);
- regeneration after an edit in the middle: the document and one continuation, a fast
  splice of one token in the middle of the document (the continuation moves with it),
  then one regeneration per seed from the edited document's end.

A third row regenerates from the same point at temperature 0.8 with no cut at all (the
raw tempered distribution, flatter, so fewer drafts hold).

The drafts that win here come mostly from the alternatives table (``decode.draft_table``);
the rows say how many. Each seed gives the same text with drafting on and off (the
acceptance rule keeps the model's distribution and its draws exactly); the rows check
it.
"""

from __future__ import annotations

from loomterm.bench.common import make_loom
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import timed
from loomterm.config.presets import SHIPPED
from loomterm.engine.decode.draft_table import TABLE

TEMPERATURE = 0.8
SESSION_SAMPLERS = dict(SHIPPED["llama.cpp"])  # what a new session samples with
PLAIN_T = {"temperature": TEMPERATURE}
MODES = ("off", "auto")


def sampled_rows(section: str, loaded, prompt: list[int], new_tokens: int, seeds: int, log):
    log(f"drafted decoding: {seeds} sampled regenerations, then after an edit")
    cuts = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in SESSION_SAMPLERS.items())
    return [
        _row(section, f"sampled regenerations x{seeds} ({cuts})",
             _interleaved(loaded, prompt, new_tokens, seeds, _same_point, SESSION_SAMPLERS)),
        _row(section, f"regenerate after a mid-document edit x{seeds} (the same samplers)",
             _interleaved(loaded, prompt, new_tokens, seeds, _after_edit, SESSION_SAMPLERS)),
        _row(section, f"sampled regenerations x{seeds} (temperature {TEMPERATURE} alone)",
             _interleaved(loaded, prompt, new_tokens, seeds, _same_point, PLAIN_T), target=""),
    ]  # fmt: skip


def _same_point(loaded, prompt, new_tokens, mode, sampling):
    """A fresh loom with the prompt and one earlier sibling; regenerate from the prompt."""
    loom = make_loom(loaded, drafting=mode)
    node = loom.append_tokens(loom.root, prompt)
    loom.generate(node, new_tokens, seed=1000, **sampling)
    return loom, node


def _after_edit(loaded, prompt, new_tokens, mode, sampling):
    """A fresh loom with the prompt and one continuation, then one token in the middle
    of the prompt replaced (fast splice); regenerate from the edited prompt's end."""
    loom = make_loom(loaded, drafting=mode)
    node = loom.append_tokens(loom.root, prompt)
    (first,) = loom.generate(node, new_tokens, seed=1000, **sampling)
    middle = len(prompt) // 2
    old = loom.tokens(first)[middle]
    replacement = [(old + 1) % loom.runner.vocab_size]
    edited = loom.splice_tokens(first, middle, middle + 1, replacement, exact=False)
    return loom, loom.truncate(edited, len(prompt))  # the ending stays below, as a branch


def _interleaved(loaded, prompt, new_tokens, seeds, setup, sampling) -> dict:
    """Each mode on its own fresh loom (``setup``), the seeds alternating between the
    modes (off first, then auto first, ...), so a busy moment on the machine falls on
    both alike."""
    looms = {mode: setup(loaded, prompt, new_tokens, mode, sampling) for mode in MODES}
    out = {mode: {"seconds": 0.0, "tokens": 0, "texts": [], "steps": 0, "accepted": 0,
                  "from_table": 0} for mode in MODES}  # fmt: skip
    for seed in range(seeds):
        order = MODES if seed % 2 == 0 else MODES[::-1]
        for mode in order:
            loom, node = looms[mode]
            seconds, (kid,) = timed(
                loom.runner.device,
                lambda loom=loom, node=node, seed=seed: loom.generate(
                    node, new_tokens, seed=seed, **sampling
                ),
            )
            run = out[mode]
            run["seconds"] += seconds
            run["tokens"] += len(kid.tokens)
            run["texts"].append(list(kid.tokens))
            stats = loom.last_result.drafting
            if stats is not None:
                run["steps"] += stats.steps
                run["accepted"] += stats.accepted
                run["from_table"] += stats.by_source.get(TABLE, 0)
    for run in out.values():
        run["rate"] = run["tokens"] / run["seconds"]
    return out


def _row(section: str, name: str, runs: dict, target: str = ">=1.3") -> Row:
    off, auto = runs["off"], runs["auto"]
    same = off["texts"] == auto["texts"]
    per_step = auto["accepted"] / auto["steps"] if auto["steps"] else 0.0
    return Row(
        section,
        name,
        off["rate"],
        auto["rate"],
        "tok/s",
        ratio(auto["rate"], off["rate"]),
        target,
        note=("same text per seed" if same else "TEXT DIFFERS PER SEED")
        + f", {per_step:.2f} accepted/step ({auto['from_table']} of {auto['accepted']} from"
        " the alternatives table)",
        extra={
            "identical": same,
            "steps": auto["steps"],
            "accepted": auto["accepted"],
            "from_table": auto["from_table"],
        },
    )
