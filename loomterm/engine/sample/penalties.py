"""Stages 1-3 of the sampling chain: logit bias, penalties and DRY (``sample.chain``).

Each is a pure function of logits (B, V) and the rows' history; DRY's sequence
breakers are resolved to token ids once per model (``resolve_dry_breakers``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from loomterm.engine.sample.params import NEVER, Bias, normalise_bias

if TYPE_CHECKING:
    from loomterm.engine.sample.params import SamplingParams

DRY_MAX_BREAKER_CHARS = 40  # llama.cpp truncates a breaker string to this ...
DRY_MAX_TAIL_TOKENS = 20  # ... and the tail of a multi-token breaker to this
_FLOAT_MAX_LOG = 88.7228391  # log(FLT_MAX): DRY's exponent is clamped below it


# -- DRY sequence breakers as token ids --------------------------------------------------
@dataclass(frozen=True, eq=False)
class DryBreakers:
    """DRY's sequence breakers resolved to token ids, as llama.cpp keeps them: each head
    token maps to the tails that complete a breaker after it (``()`` when the head token
    alone holds the whole breaker string). A repeat never spans a breaker, and a
    single-token breaker is never penalised itself."""

    tails: Mapping[int, tuple[tuple[int, ...], ...]]

    @classmethod
    def from_sequences(cls, sequences: Iterable[Sequence[int]]) -> DryBreakers:
        """Breakers given directly as token sequences (llama.cpp's testing entry):
        ``[[13], [25, 7]]`` is the token 13 alone, and 25 followed by 7."""
        tails: dict[int, list[tuple[int, ...]]] = {}
        for seq in sequences:
            seq = [int(t) for t in seq]
            if not seq:
                continue
            entry = tails.setdefault(seq[0], [])
            if tuple(seq[1:]) not in entry:
                entry.append(tuple(seq[1:]))
        return cls({head: tuple(t) for head, t in tails.items()})

    @property
    def singles(self) -> frozenset[int]:
        """Tokens that are a whole breaker on their own."""
        return frozenset(h for h, tails in self.tails.items() if () in tails)


def resolve_dry_breakers(
    breakers: Iterable[str],
    pieces: Sequence[str],
    encode: Callable[[str], Sequence[int]],
) -> DryBreakers:
    """llama.cpp's ``get_overlapping_token_sequences`` (from koboldcpp, by pi6am).

    ``pieces[i]`` is token ``i``'s text (e.g. ``tokenizer.decode([i])`` for every id);
    ``encode`` tokenises a string without special tokens (e.g.
    ``lambda s: tokenizer.encode(s, add_special_tokens=False)``). A token whose text
    contains a breaker is a single-token breaker; a token whose text *ends* with the
    start of a breaker is a head, with the rest of the breaker, tokenised, as its tail.
    Breakers are cut to 40 characters and tails to 20 tokens, as in llama.cpp. This
    scans the vocabulary: the engine should cache the result per model and breaker list.
    """
    found: dict[int, list[tuple[int, ...]]] = {}
    for text in breakers:
        if not text:
            continue
        text = text[:DRY_MAX_BREAKER_CHARS]
        first = text[0]
        for token, word in enumerate(pieces):
            if text in word:
                entry = found.setdefault(token, [])
                if () not in entry:
                    entry.append(())
                continue
            pos = word.find(first)
            while pos != -1:
                i = 1
                while i < len(text) and pos + i < len(word) and word[pos + i] == text[i]:
                    i += 1
                if pos + i == len(word):  # the word ends with text[:i]
                    tail = tuple(int(t) for t in encode(text[i:]))[:DRY_MAX_TAIL_TOKENS]
                    entry = found.setdefault(token, [])
                    if tail not in entry:
                        entry.append(tail)
                pos = word.find(first, pos + 1)
    return DryBreakers({head: tuple(tails) for head, tails in found.items()})


# -- history ------------------------------------------------------------------------------
History = torch.Tensor | Sequence[Sequence[int]] | Sequence[torch.Tensor]


def _history_rows(history: History, rows: int) -> torch.Tensor | list[torch.Tensor]:
    """A (B, T) tensor when rectangular, else one 1-D tensor per row."""
    if isinstance(history, torch.Tensor):
        if history.dim() != 2 or history.shape[0] != rows:
            raise ValueError(f"history must be (B={rows}, T), got {tuple(history.shape)}")
        return history
    if len(history) != rows:
        raise ValueError(f"history must have one row per logits row ({rows})")
    per_row = [torch.as_tensor(h, dtype=torch.long).reshape(-1) for h in history]
    if len({len(h) for h in per_row}) == 1:
        return torch.stack(per_row)
    return per_row


def _last(tokens: torch.Tensor, n: int) -> torch.Tensor:
    """The last ``n`` tokens along the last dim (-1: all, 0: none)."""
    if n == -1 or n >= tokens.shape[-1]:
        return tokens
    return tokens[..., tokens.shape[-1] - n :]


# -- stage 1: logit bias -------------------------------------------------------------------
def apply_logit_bias(
    logits: torch.Tensor, bias: Sequence[tuple[int, float]] | Mapping[int, Bias]
) -> torch.Tensor:
    """Add each token's bias (float32); -inf makes it impossible. Tokens beyond the
    vocabulary are ignored (as llama.cpp does). logits: (B, V)."""
    pairs = [(t, b) for t, b in normalise_bias(bias) if t < logits.shape[-1]]
    if not pairs:
        return logits
    ids = torch.tensor([t for t, _ in pairs], device=logits.device)
    values = torch.tensor([b for _, b in pairs], dtype=torch.float32, device=logits.device)
    out = logits.float().clone()
    out[:, ids] += values
    return out


def logit_bias_from_strings(
    items: Mapping[str, Bias] | Iterable[tuple[str, Bias]],
    encode: Callable[[str], Sequence[int]],
) -> dict[int, Bias]:
    """A string's bias on every token of its tokenisation (llama.cpp's server does the
    same), for ``SamplingParams(logit_bias=...)``. ``encode`` tokenises without special
    tokens. Tokens shared by several strings add their biases; ``"never"`` wins."""
    pairs = items.items() if isinstance(items, Mapping) else items
    out: dict[int, float] = {}
    for text, bias in pairs:
        value = float("-inf") if bias == NEVER else normalise_bias({0: bias})[0][1]
        for token in encode(text):
            out[int(token)] = out.get(int(token), 0.0) + value
    return {t: NEVER if math.isinf(b) and b < 0 else b for t, b in out.items()}


def resolve_logit_bias(
    table: Mapping[str | int, Bias], encode: Callable[[str], Sequence[int]]
) -> dict[int, Bias]:
    """A settings table (keys: token ids, as ints or digit strings, or text) as token
    ids. Text biases every token of its tokenisation (``logit_bias_from_strings``)."""
    ids: dict[int, Bias] = {}
    texts: dict[str, Bias] = {}
    for key, bias in table.items():
        if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
            ids[int(key)] = bias
        else:
            texts[str(key)] = bias
    merged = dict(logit_bias_from_strings(texts, encode)) if texts else {}
    for token, bias in ids.items():
        old = merged.get(token, 0.0)
        merged[token] = NEVER if NEVER in (bias, old) else float(old) + float(bias)
    return merged


# -- stage 2: penalties --------------------------------------------------------------------
def apply_repetition_penalty(
    logits: torch.Tensor, history: torch.Tensor, penalty: float
) -> torch.Tensor:
    """CTRL-style penalty on tokens already in ``history``. logits: (B, V); history:
    (B, T) token ids (T may be 0)."""
    if penalty == 1.0 or history.numel() == 0:
        return logits
    picked = logits.gather(1, history)  # (B, T)
    picked = torch.where(picked > 0, picked / penalty, picked * penalty)
    return logits.scatter(1, history, picked)


def token_counts(history: torch.Tensor, vocab: int) -> torch.Tensor:
    """How often each token occurs per row: (B, T) ids -> (B, V) float32."""
    counts = torch.zeros(history.shape[0], vocab, dtype=torch.float32, device=history.device)
    if history.numel():
        counts.scatter_add_(1, history, torch.ones(history.shape, device=history.device))
    return counts


def apply_penalties(
    logits: torch.Tensor, history: History | None, params: SamplingParams
) -> torch.Tensor:
    """Stage 2, over the last ``penalty_last_n`` tokens of each row's history:
    the repetition penalty, then ``- (frequency * count + presence * [count > 0])``
    (llama.cpp's ``sample.penalties`` sampler). logits: (B, V)."""
    if history is None or not params.penalties_active:
        return logits
    rows = _history_rows(history, logits.shape[0])
    if isinstance(rows, list):  # ragged: one row at a time
        return torch.cat(
            [apply_penalties(logits[b : b + 1], row[None], params) for b, row in enumerate(rows)]
        )
    window = _last(rows.to(logits.device), params.penalty_last_n)
    logits = apply_repetition_penalty(logits, window, params.repetition_penalty)
    if params.presence_penalty != 0.0 or params.frequency_penalty != 0.0:
        counts = token_counts(window, logits.shape[-1])
        cut = params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
        logits = logits.float() - cut
    return logits


# -- stage 3: DRY ----------------------------------------------------------------------------
def dry_penalty(length: int, params: SamplingParams) -> float:
    """DRY's penalty for extending a repeat of ``length`` tokens:
    ``multiplier * base ** (length - allowed_length)``, the exponent clamped so the
    float cannot overflow (llama.cpp)."""
    exponent = length - params.dry_allowed_length
    if params.dry_base > 1.000001:
        cap = int(_FLOAT_MAX_LOG / math.log(params.dry_base))
        if cap > 0:
            exponent = min(exponent, cap)
    return params.dry_multiplier * params.dry_base**exponent


def _repeat_limit(window: list[int], breakers: DryBreakers | None) -> int:
    """llama.cpp's step 1: how far back from the end a repeat may reach before it would
    span the most recent sequence breaker (a head followed by one of its tails)."""
    size = len(window)
    if not breakers or not breakers.tails:
        return size
    tails = breakers.tails
    for i in range(size):  # i tokens after the head
        options = tails.get(window[size - 1 - i])
        if options is None:
            continue
        longest = -1
        for tail in options:
            if longest < len(tail) <= i and tuple(window[size - i : size - i + len(tail)]) == tail:
                longest = len(tail)
        if longest >= 0:
            return i - longest
    return size


def _suffix_repeats(rev: list[int]) -> list[int]:
    """The Z-algorithm over the reversed text (llama.cpp's step 2): ``out[k]`` is the
    longest ``n`` with ``rev[:n] == rev[k:k+n]``, i.e. how far the end of the text
    matches the text ending ``k`` tokens earlier. O(len)."""
    size = len(rev)
    out = [0] * size
    lt = rt = 0
    for k in range(1, size):
        if k > rt:
            n = 0
            while n + k < size and rev[n] == rev[n + k]:
                n += 1
            out[k] = n
            if n > 0:
                lt, rt = k, k + n - 1
        elif out[k - lt] < rt - k + 1:
            out[k] = out[k - lt]
        else:
            i = rt + 1
            while i < size and rev[i] == rev[i - k]:
                i += 1
            out[k] = i - k
            lt, rt = k, i - 1
    return out


def dry_repeat_lengths(
    tokens: Sequence[int] | torch.Tensor,
    params: SamplingParams,
    breakers: DryBreakers | None = None,
) -> dict[int, int]:
    """Which tokens DRY penalises after ``tokens`` (one row's history) and the length
    of the repeat each would extend (llama.cpp's steps 1-3, with the same caps).

    For each earlier position whose preceding text matches the end of ``tokens`` over
    ``n >= allowed_length`` tokens (``n`` capped where a sequence breaker intervenes),
    the token that followed there would extend that repeat; each token keeps its
    longest ``n``. Single-token breakers are never penalised. Only the last
    ``dry_penalty_last_n`` tokens are read (-1: all).
    """
    if not params.dry_active:
        return {}
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.reshape(-1).tolist()
    window = list(tokens)
    if params.dry_penalty_last_n != -1:
        window = window[len(window) - min(params.dry_penalty_last_n, len(window)) :]
    size, allowed = len(window), params.dry_allowed_length
    if size <= allowed:
        return {}
    limit = _repeat_limit(window, breakers)
    if limit < allowed:
        return {}
    rev = window[::-1]
    repeats = _suffix_repeats(rev)
    singles = breakers.singles if breakers else frozenset()
    out: dict[int, int] = {}
    # Step 3: the token that followed each repeat (rev[k - 1]) would extend it.
    for k in range(1, size):
        span = min(repeats[k], limit)
        if span >= allowed:
            token = rev[k - 1]
            if token not in singles and span > out.get(token, -1):
                out[token] = span
    return out


def apply_dry(
    logits: torch.Tensor,
    history: History | None,
    params: SamplingParams,
    breakers: DryBreakers | None = None,
) -> torch.Tensor:
    """Stage 3: subtract ``dry_penalty(n)`` from each token that would extend a repeat
    of ``n >= dry_allowed_length`` tokens of the row's history (``dry_repeat_lengths``).
    The bookkeeping runs on the CPU over token ids; the logits stay on their device."""
    if history is None or not params.dry_active:
        return logits
    if breakers is None and params.dry_sequence_breakers:
        raise ValueError(
            "DRY's sequence breakers must be resolved to token ids: "
            "SamplerState.start(..., dry_breakers=resolve_dry_breakers(...))"
        )
    rows = _history_rows(history, logits.shape[0])
    if isinstance(rows, torch.Tensor):
        rows = _last(rows, params.dry_penalty_last_n).tolist()
    row_ids, col_ids, cuts = [], [], []
    vocab = logits.shape[-1]
    for b, row in enumerate(rows):
        for token, span in dry_repeat_lengths(row, params, breakers).items():
            if token < vocab:
                row_ids.append(b)
                col_ids.append(token)
                cuts.append(dry_penalty(span, params))
    if not cuts:
        return logits
    out = logits.float().clone()
    device = logits.device
    index = (torch.tensor(row_ids, device=device), torch.tensor(col_ids, device=device))
    out.index_put_(index, -torch.tensor(cuts, dtype=torch.float32, device=device), accumulate=True)
    return out
