"""The token-healing rows: does the model finish a word the writer stopped typing in?

Words of the bench corpus are cut in the middle (the prompt is the text before the word,
from a sentence start at most ``CONTEXT_CHARS`` back, plus the word's first part); each
cut is continued greedily for ``new_tokens`` tokens with token healing off (the
baseline), on and auto (``token_healing``, ``sample.healing``), on a fresh loom per mode.
A continuation *completes the word* when its text goes on with exactly the rest of the
word and then a non-letter; it *continues the word* when its first character is a
letter (not a space or punctuation, which would end the word where it was cut). Half as
many prompts end with a whole word: a mode *keeps* it when the continuation starts with a
non-letter (the writer's word stays the word they typed; on may lengthen it, auto should
not). Every mode's texts start with the typed prompt (the rows check it). The last row is
the time per generation, healing against not.
"""

from __future__ import annotations

import functools
import random
import re

from loomterm.bench.common import make_loom
from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import timed

HEALING = "Healing"
HEALING_NOTE = "words cut in the middle, continued greedily; baseline: token healing off"
CONTEXT_CHARS = 240  # the text before a cut word the prompt keeps, at most
WORD = re.compile(r"(?<![\w'])([A-Za-z]{5,})(?![\w'])")
MODES = ("off", "on", "auto")


def word_cuts(text: str, count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` (prompt, rest of the word) pairs: words of five letters or more cut
    after 2 to ``len - 2`` letters, spread over ``text`` (seeded)."""
    found = list(WORD.finditer(text))
    rng = random.Random(seed)
    step = max(1, len(found) // max(1, count))
    cuts = []
    for match in found[::step][:count]:
        word = match.group(1)
        at = rng.randint(2, len(word) - 2)
        start = match.start()
        before = text[max(0, start - CONTEXT_CHARS) : start]
        sentence = max(before.rfind(". "), before.rfind("\n"))
        before = before[sentence + 1 :].lstrip() if sentence >= 0 else before.lstrip()
        cuts.append((before + word[:at], word[at:]))
    return cuts


def whole_words(text: str, count: int) -> list[str]:
    """``count`` prompts that end with a whole word of five letters or more, spread over
    ``text``, each from a sentence start at most ``CONTEXT_CHARS`` back."""
    found = list(WORD.finditer(text))
    step = max(1, len(found) // max(1, count))
    prompts = []
    for match in found[step // 2 :: step][:count]:  # other words than the cuts'
        start = match.start()
        before = text[max(0, start - CONTEXT_CHARS) : start]
        sentence = max(before.rfind(". "), before.rfind("\n"))
        before = before[sentence + 1 :].lstrip() if sentence >= 0 else before.lstrip()
        prompts.append(before + match.group(1))
    return prompts


def completes(after: str, rest: str) -> bool:
    """``after`` goes on with exactly ``rest`` and then a non-letter (or nothing)."""
    return after.startswith(rest) and not after[len(rest) : len(rest) + 1].isalpha()


def healing_rows(loaded, text: str, cuts: int, new_tokens: int, log) -> list[Row]:
    """Words completed and continued at cuts, whole words kept, time per generation;
    healing off, on and auto."""
    pairs = word_cuts(text, cuts)
    wholes = whole_words(text, max(1, cuts // 2))
    log(
        f"token healing: {len(pairs)} word cuts and {len(wholes)} whole words, "
        f"{new_tokens} greedy tokens, healing {'/'.join(MODES)}"
    )
    done = {mode: 0 for mode in MODES}
    letter = {mode: 0 for mode in MODES}
    kept = {mode: 0 for mode in MODES}
    seconds = {mode: 0.0 for mode in MODES}
    exact = True
    for mode in MODES:
        loom = make_loom(loaded)
        loom.update_settings(token_healing=mode)
        for prompt, rest in [*pairs, *((whole, None) for whole in wholes)]:
            node = loom.append(loom.root, prompt)
            generate = functools.partial(loom.generate, node, new_tokens, temperature=0)
            took, kids = timed(loaded.device, generate)
            written = loom.text(kids[0]) if kids else loom.text(node)
            exact = exact and written.startswith(prompt)
            after = written[len(prompt) :]
            if rest is None:
                kept[mode] += not after[:1].isalpha()
            else:
                seconds[mode] += took
                done[mode] += completes(after, rest)
                letter[mode] += after[:1].isalpha()
            for item in list(node.path()[1:]):  # the KV of this prompt is not needed again
                loom.runner.evict(item)
    count, whole = max(1, len(pairs)), max(1, len(wholes))
    note = f"{len(pairs)} cuts" + ("" if exact else "; A TEXT LOST TYPED CHARACTERS")
    share = {mode: 100.0 * done[mode] / count for mode in MODES}
    going = {mode: 100.0 * letter[mode] / count for mode in MODES}
    keeps = {mode: 100.0 * kept[mode] / whole for mode in MODES}
    per = {mode: seconds[mode] / count for mode in MODES}
    kept_note = f"{len(wholes)} whole words; off keeps {keeps['off']:.1f}%"
    return [
        Row(HEALING, "cut words completed, on", share["off"], share["on"], "%",
            ratio(share["on"], share["off"]), target=">=1.5", note=note),
        Row(HEALING, "cut words completed, auto (the default)", share["off"], share["auto"],
            "%", ratio(share["auto"], share["off"]), target=">=1.5", note=note),
        Row(HEALING, "cut words continued with a letter, auto", going["off"], going["auto"],
            "%", ratio(going["auto"], going["off"]), note=note),
        Row(HEALING, "whole words kept as typed, auto against on", keeps["on"], keeps["auto"],
            "%", ratio(keeps["auto"], keeps["on"]), note=kept_note),
        Row(HEALING, f"seconds per {new_tokens}-token generation, auto (cost of healing)",
            per["off"], per["auto"], "s", ratio(per["auto"], per["off"]), target="<=1.5"),
    ]  # fmt: skip
