"""The token-healing rows: does the model finish a word the writer stopped typing in?

Words of the bench corpus are cut in the middle (the prompt is the text before the word,
from a sentence start at most ``CONTEXT_CHARS`` back, plus the word's first part); each
cut is continued greedily for ``new_tokens`` tokens with token healing off (the
baseline) and on (``token_healing``, ``sample.healing``), on a fresh loom per mode.
A continuation *completes the word* when its text goes on with exactly the rest of the
word and then a non-letter; it *continues the word* when its first character is a
letter (not a space or punctuation, which would end the word where it was cut). Both
modes' texts start with the typed prompt (the rows check it). A third row is the time
per generation, healing against not.
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
MODES = ("off", "on")


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


def completes(after: str, rest: str) -> bool:
    """``after`` goes on with exactly ``rest`` and then a non-letter (or nothing)."""
    return after.startswith(rest) and not after[len(rest) : len(rest) + 1].isalpha()


def healing_rows(loaded, text: str, cuts: int, new_tokens: int, log) -> list[Row]:
    """Three rows: words completed, words continued, time per generation; off vs on."""
    pairs = word_cuts(text, cuts)
    log(f"token healing: {len(pairs)} word cuts, {new_tokens} greedy tokens, healing off/on")
    done = {mode: 0 for mode in MODES}
    letter = {mode: 0 for mode in MODES}
    seconds = {mode: 0.0 for mode in MODES}
    exact = True
    for mode in MODES:
        loom = make_loom(loaded)
        loom.update_settings(token_healing=mode == "on")
        for prompt, rest in pairs:
            node = loom.append(loom.root, prompt)
            generate = functools.partial(loom.generate, node, new_tokens, temperature=0)
            took, kids = timed(loaded.device, generate)
            seconds[mode] += took
            written = loom.text(kids[0]) if kids else loom.text(node)
            exact = exact and written.startswith(prompt)
            after = written[len(prompt) :]
            done[mode] += completes(after, rest)
            letter[mode] += after[:1].isalpha()
            for item in list(node.path()[1:]):  # the KV of this cut is not needed again
                loom.runner.evict(item)
    count = max(1, len(pairs))
    note = f"{len(pairs)} cuts" + ("" if exact else "; A TEXT LOST TYPED CHARACTERS")
    share = {mode: 100.0 * done[mode] / count for mode in MODES}
    going = {mode: 100.0 * letter[mode] / count for mode in MODES}
    per = {mode: seconds[mode] / count for mode in MODES}
    return [
        Row(HEALING, "cut words completed", share["off"], share["on"], "%",
            ratio(share["on"], share["off"]), target=">=1.5", note=note),
        Row(HEALING, "cut words continued with a letter", going["off"], going["on"], "%",
            ratio(going["on"], going["off"]), note=note),
        Row(HEALING, f"seconds per {new_tokens}-token generation (cost of healing)",
            per["off"], per["on"], "s", ratio(per["on"], per["off"]), target="<=1.5"),
    ]  # fmt: skip
