"""Token healing, the Loom's part: which typed tokens to back up before a generation.

A generation that starts after text typed up to the middle of a word (``The lighthou``)
backs up the word's typed tokens (`` light``, ``hou``) and starts from the text before
them; the decoders then constrain the first tokens to spell the backed-up text again
(``sample.healing``), so the model may choose `` lighthouse``.

Nothing changed, nothing lost: the backed-up tokens are cut off with ``truncate`` (the
typed node is split; its tail, the old spelling, stays as a sibling of the new
children, reachable), and every child's text starts with exactly the backed-up text,
so the document reads what the writer typed. Each child records that text in its
``meta["healed"]``; its first tokens up to it are the healed ones
(``text_prefix.healed_count``).

What is backed up: only the writer's text (nodes of origin user or edit) and only
when it ends in a letter or digit (not after a space or punctuation) and its last
token is the start of a longer token; then the tokens before it while the word goes
on across the token boundary (each one all word, but for a leading space: never a
token that holds a space inside, as a tokenizer's merged phrase may), at most
:data:`MAX_TOKENS` tokens and :data:`MAX_BYTES` bytes, never cutting a character.
Fewer are backed up when the generation's length could not spell them again.

When: ``on`` heals every such end; ``auto`` (the default) only where the model expects
the word to go on (:func:`word_goes_on` at least :data:`GOES_ON`), so a whole word the
writer typed ("car") is not turned into a longer one ("carriage"), while a word cut
mid-way ("lighthou") is healed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from loomterm.engine.sample.healing import Heal
from loomterm.engine.text_prefix import TokenPrefixIndex, prefix_index
from loomterm.tree import WRITER, Node

if TYPE_CHECKING:
    from loomterm.engine.generation import GenerateRequest
    from loomterm.engine.runner import Runner

MAX_TOKENS = 4  # typed tokens backed up at most
MAX_BYTES = 24  # bytes of typed text backed up at most
# ``auto`` heals when the model gives the tokens that go on with a word (a letter or
# digit first) at least this much of the next token's probability. On the default
# model and the bench corpus: 77% of words cut mid-way reach it, 1% of whole words
# (medians 0.92 and 0.003). Lower thresholds heal more cuts but turn more of the
# writer's whole words into longer ones (at 0.1: 93% and 5%; "star" -> "starboard").
GOES_ON = 0.5

_WORD_STARTS: dict[int, tuple[TokenPrefixIndex, torch.Tensor]] = {}


@dataclass(frozen=True)
class HealPlan:
    """How many of the path's last tokens to back up, and the text they spell."""

    tokens: int
    text: bytes


def word_byte(byte: int) -> bool:
    """A byte that belongs to a word: an ASCII letter, digit or underscore, or a byte of
    a non-ASCII character (letters of most scripts)."""
    return byte >= 0x80 or chr(byte).isalnum() or byte == ord("_")


def plan_heal(
    tail: Sequence[bytes],
    index: TokenPrefixIndex,
    budget: int,
    whole: Callable[[int], bool] = lambda k: True,
) -> HealPlan | None:
    """The tokens to back up from ``tail``, the bytes of the path's last typed tokens
    (oldest first), for a generation of at most ``budget`` tokens; None: no healing.
    ``whole(k)``: whether cutting before the last ``k`` tokens cuts between characters.
    """
    if not tail or budget < 1:
        return None
    last = tail[-1]
    if not last or not word_byte(last[-1]) or not index.extends(last):
        return None
    count, text = 1, last
    while count < min(len(tail), MAX_TOKENS):
        before = tail[-count - 1]
        if not before or not (word_byte(before[-1]) and word_byte(text[0])):
            break
        if not all(map(word_byte, before.removeprefix(b" "))):
            break  # a token that holds more than the word's start (b"upon a tim"): stays
        if len(before) + len(text) > MAX_BYTES:
            break
        count, text = count + 1, before + text
    while count > 1 and (not whole(count) or index.cover_steps(text) > budget):
        text = text[len(tail[-count]) :]
        count -= 1
    if not whole(count) or index.cover_steps(text) > budget:
        return None
    return HealPlan(count, text)


def word_starts(index: TokenPrefixIndex) -> torch.Tensor:
    """(vocab,) bool: the tokens whose text starts with a word's byte (``word_byte``),
    built once per vocabulary."""
    held = _WORD_STARTS.get(id(index))
    if held is not None and held[0] is index:
        return held[1]
    mask = torch.tensor(
        [bool(b) and word_byte(b[0]) for b in map(index.bytes_of, range(index.vocab_size))],
        dtype=torch.bool,
    )  # (vocab,)
    _WORD_STARTS[id(index)] = (index, mask)
    return mask


def word_goes_on(runner: Runner, node: Node, index: TokenPrefixIndex) -> float:
    """The model's probability that the token after ``node``'s path goes on with the
    word the path ends in (its text starts with a word's byte)."""
    logits = runner.prepare(node).float()  # (vocab,) or padded wider
    mask = word_starts(index)  # (vocab,)
    probs = torch.softmax(logits, dim=-1)[: mask.shape[0]]  # (vocab,)
    return float(probs[mask[: probs.shape[0]]].sum())


def typed_tail(node: Node, limit: int = MAX_TOKENS) -> list[int]:
    """The last (at most ``limit``) tokens of ``node``'s path that the writer typed
    (their nodes' origin is user or edit), oldest first."""
    tokens: list[int] = []
    if limit < 1:
        return tokens
    item: Node | None = node
    while item is not None and item.parent is not None and len(tokens) < limit:
        if item.origin not in WRITER:
            break
        tokens[:0] = item.tokens[-(limit - len(tokens)) :]
        item = item.parent
    return tokens


def healed(
    request: GenerateRequest, runner: Runner, truncate: Callable[[Node, int], Node]
) -> GenerateRequest:
    """``request`` with its healing planned: started before the backed-up tokens
    (``truncate(node, length)``, the Loom's) and carrying the :class:`Heal` the
    decoders spell again; ``request`` itself when nothing is healed (healing not asked
    for, the runner cannot, banned phrases are set, or the text does not end in a
    word)."""
    if request.healing not in ("on", "auto") or request.heal is not None or request.banned:
        return request
    if not runner.capabilities.healing:
        return request
    node = request.node
    tokens = typed_tail(node, min(MAX_TOKENS, node.end - 1))  # something stays before
    if not tokens:
        return request
    codec = runner.codec
    index = prefix_index(codec, runner.vocab_size)
    tail = [codec.token_bytes(token) for token in tokens]

    def whole(count: int) -> bool:  # a character's continuation byte never starts a cut
        first = b"".join(tail[-count:])[:1]
        return bool(first) and not 0x80 <= first[0] < 0xC0

    plan = plan_heal(tail, index, request.max_new_tokens, whole)
    if plan is None:
        return request
    if request.healing == "auto" and word_goes_on(runner, node, index) < GOES_ON:
        return request  # a whole word, most likely: the writer's word stays as typed
    start = truncate(node, node.end - plan.tokens)
    return replace(request, node=start, heal=Heal(plan.text, plan.tokens, index))
