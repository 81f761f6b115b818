"""Sampling as pure functions of logits (in the spirit of gpt-fast's ``generate.py``).

Every stage maps logits (B, V) to logits (B, V), row by row, on the logits' device;
a token a stage removes gets ``-inf``. Random draws happen on the CPU with one
``torch.Generator`` per row, so a seed gives the same sample on any device and whatever
the batch size. Parameter names and definitions are llama.cpp's
(``src/llama-sampling.cpp``, ``common/sampling.cpp``), so presets carry over.

The chain
---------
One order, always this one; a stage whose knobs are neutral is skipped and changes
nothing (so with every new knob neutral, output is bit for bit what it was before they
existed).

 1. logit bias  ``logit_bias``: add each listed token's bias; ``"never"`` is -inf.
 2. penalties   over the last ``penalty_last_n`` tokens of the row's history (-1: all
                of it, 0: none): ``repetition_penalty`` (CTRL: a positive logit is
                divided by it, a negative one multiplied), then
                ``- (frequency_penalty * count + presence_penalty * [count > 0])``.
 3. DRY         ``dry_*`` over the last ``dry_penalty_last_n`` tokens of the history.

 Greedy (``temperature == 0`` without dynamic temperature) takes the argmax here;
 nothing below applies and no randomness is used.

 With ``mirostat == 0``:

 4. temperature ``logits / temperature``; skipped when ``dynatemp_range > 0`` (10.)
 5. top-k       ``top_k``
 6. typical     ``typical_p``
 7. top-p       ``top_p``
 8. min-p       ``min_p``
 9. XTC         ``xtc_probability``, ``xtc_threshold``: on the row's coin
10. dynatemp    ``dynatemp_range``, ``dynatemp_exponent``: a temperature in
                ``[max(0, T - range), T + range]`` from the entropy of what is left
11. draw        one draw from the row's generator (after the XTC coin, when XTC is on)

 With ``mirostat == 2`` (mirostat v2 replaces stages 5-10, as in llama.cpp):

 4. temperature
 5. mirostat v2 keep the tokens whose surprise ``-log2 p`` is at most the row's ``mu``
                (at least the most likely one), renormalise, draw; then
                ``mu -= mirostat_eta * (-log2 p(chosen) - mirostat_tau)`` (``advance``)

Against llama.cpp's default chain (penalties, DRY, top-k, typical, top-p, min-p, XTC,
temperature): the same order, except that a plain ``temperature`` comes before the
truncation samplers, as in transformers and as loomterm always did. So with
``temperature != 1`` the truncation samplers (top-p, min-p, typical, XTC) see the
tempered distribution here and the untempered one in llama.cpp; at temperature 1, and
with dynamic temperature (which sits last, as llama.cpp's), the chains agree. Also:
``penalty_last_n`` defaults to -1 here (llama.cpp: 64) because the repetition penalty
always read the whole path; llama.cpp drops penalties and DRY when mirostat is on,
this chain keeps them (they are not truncation samplers); under greedy XTC never
applies (llama.cpp would remove the top choice before its argmax).

State and randomness
--------------------
``SamplerState`` is made per generation (``SamplerState.start``) and threaded through
``sample_step``, which returns the next one: it holds mirostat's ``mu`` per row and the
DRY sequence breakers resolved to token ids. Each row's generator is drawn from in this
order per token: the XTC coin (only when XTC is on), then the token.

DRY's sequence breakers are strings in ``SamplingParams`` (so presets carry over); the
engine resolves them once per model and breaker list with
``resolve_dry_breakers(params.dry_sequence_breakers, pieces, encode)`` (llama.cpp's
rule: tokens containing a breaker, and tokens ending with its start plus the rest as
a token tail) and hands them to ``SamplerState.start(..., dry_breakers=...)``.
``DryBreakers.from_sequences`` takes token ids directly.

``params.verifiable`` is True when each step's distribution is a function of the
logits and the prefix only: everything but mirostat and XTC (see ``SamplerState`` for
why drafted decoding stays exact with those too, and what it must not do).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from loomterm.errors import InputError

TOP_ALTERNATIVES = 10

# llama.cpp's defaults for the DRY sequence breakers (``common/common.h``).
DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")
DRY_MAX_BREAKER_CHARS = 40  # llama.cpp truncates a breaker string to this ...
DRY_MAX_TAIL_TOKENS = 20  # ... and the tail of a multi-token breaker to this
_FLOAT_MAX_LOG = 88.7228391  # log(FLT_MAX): DRY's exponent is clamped below it

NEVER = "never"
Bias = float | str  # a float, or "never"


def _normalise_bias(value) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` as sorted ``(token, bias)`` pairs; repeated tokens add up (as
    llama.cpp applies each entry), ``"never"`` (or -inf) is -inf."""
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    total: dict[int, float] = {}
    try:
        pairs = [tuple(item) for item in items]
    except TypeError:
        raise InputError("logit_bias must map token ids to a bias or 'never'") from None
    for pair in pairs:
        if len(pair) != 2:
            raise InputError("logit_bias must map token ids to a bias or 'never'")
        token, bias = pair
        if isinstance(token, str) and token.strip().isdigit():
            token = int(token)
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise InputError(f"logit_bias keys must be token ids >= 0, got {token!r}")
        if bias == NEVER or (isinstance(bias, float) and bias == float("-inf")):
            bias = float("-inf")
        else:
            ok = not isinstance(bias, bool) and isinstance(bias, (int, float))
            if not ok or not math.isfinite(bias):
                raise InputError(f"logit_bias values must be numbers or 'never', got {bias!r}")
            bias = float(bias)
        total[token] = total.get(token, 0.0) + bias
    return tuple(sorted(total.items()))


@dataclass(frozen=True)
class SamplingParams:
    """The knobs of one generation. Defaults are neutral: each stage is off."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    # -- issue 12 (llama.cpp's names and definitions) --
    typical_p: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = DRY_SEQUENCE_BREAKERS
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = -1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 <= self.min_p < 1:
            raise InputError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise InputError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

        def check(name: str, ok: Callable[[float], bool], allowed: str) -> None:
            value = getattr(self, name)
            number = not isinstance(value, bool) and isinstance(value, (int, float))
            if not number or math.isnan(value) or not ok(value):
                raise InputError(f"{name} must be {allowed}, got {value!r}")

        def check_int(name: str, ok: Callable[[int], bool], allowed: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
                raise InputError(f"{name} must be an integer {allowed}, got {value!r}")

        check("typical_p", lambda v: 0 < v <= 1, "in (0, 1]")
        check("xtc_probability", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("xtc_threshold", lambda v: 0 <= v <= 1, "in [0, 1] (above 0.5 XTC never acts)")
        check("dry_multiplier", lambda v: 0 <= v < math.inf, ">= 0")
        check("dry_base", lambda v: 1 <= v < math.inf, ">= 1")
        check_int("dry_allowed_length", lambda v: v >= 0, ">= 0")
        check_int("dry_penalty_last_n", lambda v: v >= -1, ">= -1 (-1: whole history, 0: off)")
        breakers = self.dry_sequence_breakers
        if isinstance(breakers, str) or not isinstance(breakers, Iterable):
            raise InputError(f"dry_sequence_breakers must be a list of strings, got {breakers!r}")
        breakers = tuple(breakers)
        if not all(isinstance(b, str) and b for b in breakers):
            raise InputError(f"dry_sequence_breakers must be non-empty strings, got {breakers!r}")
        object.__setattr__(self, "dry_sequence_breakers", breakers)
        if self.mirostat not in (0, 2) or isinstance(self.mirostat, (bool, float)):
            raise InputError(f"mirostat must be 0 (off) or 2 (mirostat v2), got {self.mirostat!r}")
        check("mirostat_tau", lambda v: 0 <= v < math.inf, ">= 0")
        check("mirostat_eta", lambda v: 0 <= v < math.inf, ">= 0")
        check("presence_penalty", lambda v: -2 <= v <= 2, "in [-2, 2]")
        check("frequency_penalty", lambda v: -2 <= v <= 2, "in [-2, 2]")
        check_int("penalty_last_n", lambda v: v >= -1, ">= -1 (-1: whole history, 0: off)")
        check("dynatemp_range", lambda v: 0 <= v < math.inf, ">= 0")
        check("dynatemp_exponent", lambda v: 0 <= v < math.inf, ">= 0")
        object.__setattr__(self, "logit_bias", _normalise_bias(self.logit_bias))

    # -- what the chain does with these knobs --
    @property
    def dynatemp_active(self) -> bool:
        return self.dynatemp_range > 0 and self.mirostat == 0

    @property
    def greedy(self) -> bool:
        """Temperature 0 and no dynamic temperature: the argmax after stages 1-3."""
        return self.temperature == 0 and not self.dynatemp_active

    @property
    def penalties_active(self) -> bool:
        changes = (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )
        return changes and self.penalty_last_n != 0

    @property
    def dry_active(self) -> bool:
        """llama.cpp's test: multiplier != 0, base >= 1, last_n != 0."""
        return self.dry_multiplier > 0 and self.dry_base >= 1 and self.dry_penalty_last_n != 0

    @property
    def xtc_active(self) -> bool:
        """Whether XTC runs, hence whether each token costs a coin from the generator."""
        return (
            self.xtc_probability > 0
            and self.xtc_threshold <= 0.5
            and self.mirostat == 0
            and not self.greedy
        )

    @property
    def uses_history(self) -> bool:
        """Whether the distribution reads the path's tokens (the penalties or DRY): the
        decode loop must then pass ``history``."""
        return self.penalties_active or self.dry_active

    @property
    def verifiable(self) -> bool:
        """Whether each step's distribution is a function of the logits and the prefix
        alone (``sampling_probs`` of any row, computed in any order, is the law of
        that step). False with mirostat (``mu`` follows earlier draws) and with XTC (a
        coin per step). See ``SamplerState`` for what keeps drafting exact anyway."""
        return self.mirostat == 0 and not self.xtc_active

    def as_dict(self) -> dict:
        """Every knob, as JSON keeps it (lists, string keys, ``"never"`` for -inf)."""
        out = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "typical_p": self.typical_p,
            "xtc_probability": self.xtc_probability,
            "xtc_threshold": self.xtc_threshold,
            "dry_multiplier": self.dry_multiplier,
            "dry_base": self.dry_base,
            "dry_allowed_length": self.dry_allowed_length,
            "dry_penalty_last_n": self.dry_penalty_last_n,
            "dry_sequence_breakers": list(self.dry_sequence_breakers),
            "mirostat": self.mirostat,
            "mirostat_tau": self.mirostat_tau,
            "mirostat_eta": self.mirostat_eta,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "penalty_last_n": self.penalty_last_n,
            "dynatemp_range": self.dynatemp_range,
            "dynatemp_exponent": self.dynatemp_exponent,
            "logit_bias": {
                str(token): NEVER if math.isinf(bias) else bias for token, bias in self.logit_bias
            },
        }
        return out


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


# -- per-generation state ----------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class SamplerState:
    """What a generation carries from one token to the next, batched over rows.

    ``mu``: (B,) float32, mirostat v2's bound on surprise per row, ``2 * tau`` at the
    start (None when mirostat is off). ``dry_breakers``: the resolved DRY sequence
    breakers (constant through the generation). ``start`` makes one per generation;
    ``sample_step`` (or ``advance``) returns the next one after each chosen token.

    Drafted decoding stays exact (seed for seed) with every sampler as long as it
    chooses each emitted token with one ``sample_step`` call, in order, passing the
    true prefix as ``history`` and the state the previous call returned -- which is
    what ``drafting.accept_walk`` does: then XTC's coin and the token come out of the
    row's generator in plain decoding's order and ``mu`` follows the same tokens. What
    must not be done for mirostat or XTC (``params.verifiable`` False) is to compute
    the drafted positions' distributions ahead of the choices, in one batch.
    """

    mu: torch.Tensor | None = None
    dry_breakers: DryBreakers | None = None

    @classmethod
    def start(
        cls,
        params: SamplingParams,
        rows: int,
        device: torch.device | str | None = None,
        dry_breakers: DryBreakers | None = None,
    ) -> SamplerState:
        mu = None
        if params.mirostat == 2:
            mu = torch.full((rows,), 2.0 * params.mirostat_tau, dtype=torch.float32, device=device)
        return cls(mu, dry_breakers)

    def select(self, rows: torch.Tensor | Sequence[int]) -> SamplerState:
        """The state of some rows (reordered, repeated or dropped)."""
        if self.mu is None:
            return self
        index = torch.as_tensor(rows, dtype=torch.long, device=self.mu.device)
        return SamplerState(self.mu[index], self.dry_breakers)


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
    pairs = [(t, b) for t, b in _normalise_bias(bias) if t < logits.shape[-1]]
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
        value = float("-inf") if bias == NEVER else _normalise_bias({0: bias})[0][1]
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
    (llama.cpp's ``penalties`` sampler). logits: (B, V)."""
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


def adjust_logits(
    logits: torch.Tensor,
    params: SamplingParams,
    history: History | None = None,
    state: SamplerState | None = None,
) -> torch.Tensor:
    """Stages 1-3 (logit bias, penalties, DRY): the logits greedy takes the argmax of."""
    if params.logit_bias:
        logits = apply_logit_bias(logits, params.logit_bias)
    logits = apply_penalties(logits, history, params)
    return apply_dry(logits, history, params, state.dry_breakers if state else None)


# -- stages 5-8: truncation ------------------------------------------------------------------
def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k > 0 and k < logits.shape[-1]:
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def typical_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Locally typical sampling (Meister et al., 2022; llama.cpp's ``typical``): sort
    the candidates by ``|-log p - H|`` (H the entropy), keep the shortest prefix whose
    mass exceeds ``p``. logits: (B, V) float."""
    if p >= 1.0:
        return logits
    logp = logits.log_softmax(-1)  # (B, V)
    probs = logp.exp()
    entropy = torch.special.entr(probs).sum(-1, keepdim=True)  # (B, 1); 0 log 0 = 0
    score = (-logp - entropy).abs()  # inf for removed tokens
    score, order = torch.sort(score, dim=-1, stable=True)
    mass = probs.gather(1, order).cumsum(-1)
    before = torch.nn.functional.pad(mass[:, :-1], (1, 0))  # mass of the tokens ahead
    # Keep until the running mass first exceeds p (that token included).
    drop_sorted = (before > p) | torch.isinf(score)
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    if p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # (B, V)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token once the mass before it already reaches top_p; the best always stays.
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= p
        drop = drop_sorted.scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def min_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    if p > 0.0:
        probs = logits.softmax(-1)
        floor = p * probs.amax(-1, keepdim=True)  # (B, 1)
        logits = logits.masked_fill(probs < floor, float("-inf"))
    return logits


# -- stage 9: XTC -------------------------------------------------------------------------------
def xtc_coins(
    params: SamplingParams, generators: list[torch.Generator] | None, rows: int
) -> torch.Tensor | None:
    """One uniform in [0, 1) per row from the row's generator, drawn before the token;
    None (and nothing drawn) when XTC is off."""
    if not params.xtc_active:
        return None
    if generators is None:
        return torch.rand(rows)
    return torch.cat([torch.rand(1, generator=g) for g in generators])


def xtc_filter(
    logits: torch.Tensor, probability: float, threshold: float, coins: torch.Tensor
) -> torch.Tensor:
    """Exclude Top Choices (llama.cpp's ``xtc``, from koboldcpp): in each row whose
    coin is <= ``probability``, remove every candidate with ``p >= threshold`` except
    the least likely of them; with fewer than two above the threshold, none. ``p`` is
    over the candidates left. logits: (B, V) float; coins: (B,)."""
    if probability <= 0 or threshold > 0.5:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1, stable=True)
    sorted_p = sorted_logits.softmax(-1)
    above = ((sorted_p >= threshold) & torch.isfinite(sorted_logits)).sum(-1, keepdim=True)
    rank = torch.arange(logits.shape[-1], device=logits.device)
    acts = coins.to(logits.device).reshape(-1, 1) <= probability  # (B, 1)
    drop_sorted = (rank < above - 1) & acts  # all above but the last (least likely)
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


# -- stage 10: dynamic temperature --------------------------------------------------------------
def dynatemp_temperatures(
    logits: torch.Tensor, temperature: float, dyn_range: float, exponent: float
) -> torch.Tensor:
    """llama.cpp's ``temp_ext``: per row,
    ``min_t + (max_t - min_t) * (H / log N) ** exponent`` with ``min_t = max(0, T - range)``,
    ``max_t = T + range``, H the entropy over the N candidates left (finite logits).
    (B, V) -> (B,); NaN for a row with fewer than two candidates (left as it is)."""
    low, high = max(0.0, temperature - dyn_range), temperature + dyn_range
    count = torch.isfinite(logits).sum(-1)  # (B,)
    entropy = torch.special.entr(logits.softmax(-1)).sum(-1)  # (B,)
    normalised = entropy / count.clamp(min=2).float().log()
    temps = low + (high - low) * normalised.pow(exponent)
    return torch.where(count > 1, temps, torch.full_like(temps, float("nan")))


def apply_dynatemp(
    logits: torch.Tensor, temperature: float, dyn_range: float, exponent: float
) -> torch.Tensor:
    """Scale each row by its dynamic temperature; a row whose temperature comes out 0
    keeps only its argmax (llama.cpp's ``temp <= 0``)."""
    temps = dynatemp_temperatures(logits, temperature, dyn_range, exponent)[:, None]  # (B, 1)
    scaled = logits / temps.clamp(min=1e-6)
    best = torch.zeros_like(logits, dtype=torch.bool).scatter_(
        1, logits.argmax(-1, keepdim=True), True
    )
    greedy = logits.masked_fill(~best, float("-inf"))
    out = torch.where(temps <= 0, greedy, scaled)
    return torch.where(torch.isnan(temps), logits, out)


def filter_logits(
    logits: torch.Tensor, params: SamplingParams, xtc_coins: torch.Tensor | None = None
) -> torch.Tensor:
    """Stages 4-10 (mirostat off): temperature-scaled logits with filtered-out tokens at
    -inf. logits: (B, V); ``xtc_coins`` (B,) from ``xtc_coins`` when XTC is on (without
    them XTC acts on every row)."""
    if params.dynatemp_active:
        logits = logits.float()
    else:
        logits = logits.float() / max(params.temperature, 1e-6)  # (B, V)
    logits = top_k_filter(logits, params.top_k)
    logits = typical_filter(logits, params.typical_p)
    logits = top_p_filter(logits, params.top_p)
    logits = min_p_filter(logits, params.min_p)
    if params.xtc_active:
        if xtc_coins is None:
            xtc_coins = torch.zeros(logits.shape[0])
        logits = xtc_filter(logits, params.xtc_probability, params.xtc_threshold, xtc_coins)
    if params.dynatemp_active:
        logits = apply_dynatemp(
            logits, params.temperature, params.dynatemp_range, params.dynatemp_exponent
        )
    return logits


# -- mirostat v2 ----------------------------------------------------------------------------------
def mirostat_v2_filter(logits: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """Keep the tokens whose surprise ``-log2 p`` is at most the row's ``mu``, and at
    least the most likely one (llama.cpp's ``mirostat-v2``). logits: (B, V) float
    (already tempered); mu: (B,)."""
    surprise = -logits.log_softmax(-1) / math.log(2)  # (B, V)
    keep = surprise <= mu.to(logits.device).reshape(-1, 1)
    keep = keep.scatter(1, logits.argmax(-1, keepdim=True), True)
    return logits.masked_fill(~keep, float("-inf"))


def advance(
    state: SamplerState, params: SamplingParams, probs: torch.Tensor, chosen: torch.Tensor
) -> SamplerState:
    """The state after ``chosen`` (B,) was drawn from ``probs`` (B, V): mirostat's
    ``mu -= eta * (-log2 p(chosen) - tau)``, p under the truncated distribution drawn
    from (as llama.cpp)."""
    if params.mirostat != 2 or params.greedy or state.mu is None:
        return state
    p = probs.gather(1, chosen.reshape(-1, 1).to(probs.device)).squeeze(1).float()  # (B,)
    surprise = -torch.log2(p).to(state.mu.device)
    mu = state.mu - params.mirostat_eta * (surprise - params.mirostat_tau)
    return SamplerState(mu, state.dry_breakers)


# -- the distribution, the draw -------------------------------------------------------------------
def sampling_probs(
    logits: torch.Tensor,
    params: SamplingParams,
    history: History | None = None,
    state: SamplerState | None = None,
    xtc_coins: torch.Tensor | None = None,
) -> torch.Tensor:
    """The distribution tokens are drawn from: (B, V) float32. For greedy it is one-hot
    on the argmax.

    With XTC on, ``xtc_coins`` (from ``xtc_coins``) picks each row's branch; without
    them the result is the step's law over the coin too: ``(1 - q) * plain + q * xtc``
    with ``q = xtc_probability``. Mirostat needs ``state`` (its ``mu``).
    """
    logits = adjust_logits(logits, params, history, state)
    if params.greedy:
        probs = torch.zeros_like(logits, dtype=torch.float32)
        return probs.scatter_(1, logits.argmax(-1, keepdim=True), 1.0)
    if params.mirostat == 2:
        if state is None or state.mu is None:
            raise ValueError("mirostat needs its state: SamplerState.start(params, rows)")
        tempered = logits.float() / max(params.temperature, 1e-6)
        return mirostat_v2_filter(tempered, state.mu).softmax(-1)
    if params.xtc_active and xtc_coins is None:
        rows = logits.shape[0]
        plain = filter_logits(logits, params, torch.ones(rows)).softmax(-1)
        excluded = filter_logits(logits, params, torch.zeros(rows)).softmax(-1)
        q = params.xtc_probability
        return (1 - q) * plain + q * excluded
    return filter_logits(logits, params, xtc_coins).softmax(-1)


def draw(probs: torch.Tensor, generators: list[torch.Generator] | None) -> torch.Tensor:
    """One token per row from ``probs`` (B, V). Returns (B,) on probs' device."""
    cpu = probs.detach().float().cpu()
    if generators is None:
        return torch.multinomial(cpu, 1).squeeze(1).to(probs.device)
    picks = [torch.multinomial(cpu[b], 1, generator=g) for b, g in enumerate(generators)]
    return torch.cat(picks).to(probs.device)


def sample_step(
    logits: torch.Tensor,
    params: SamplingParams,
    generators: list[torch.Generator] | None = None,
    history: History | None = None,
    state: SamplerState | None = None,
) -> tuple[torch.Tensor, SamplerState]:
    """Next token per row, and the state after it. logits: (B, V) -> (B,) token ids.

    ``history``: each row's path so far (typed text included), (B, T) or one sequence
    per row, needed when ``params.uses_history``. ``state``: from ``SamplerState.start``
    (or the previous step); None starts a fresh one (without DRY breakers).
    """
    if state is None:
        state = SamplerState.start(params, logits.shape[0], logits.device)
    if params.greedy:
        return adjust_logits(logits, params, history, state).argmax(-1), state
    coins = xtc_coins(params, generators, logits.shape[0])
    probs = sampling_probs(logits, params, history, state, coins)
    chosen = draw(probs, generators)
    return chosen, advance(state, params, probs, chosen)


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    generators: list[torch.Generator] | None = None,
    history: History | None = None,
    state: SamplerState | None = None,
) -> torch.Tensor:
    """Next token per row. logits: (B, V) -> (B,) token ids. Stateless: with mirostat,
    use ``sample_step`` and keep the state it returns."""
    if params.mirostat and not params.greedy:
        raise ValueError("mirostat carries state from token to token: use sample_step")
    return sample_step(logits, params, generators, history, state)[0]


def make_generators(seed: int | None, rows: int) -> list[torch.Generator] | None:
    """One CPU generator per row; row ``i`` of seed ``s`` is seeded ``(s, i)``."""
    if seed is None:
        return None
    return [torch.Generator().manual_seed(seed * 1_000_003 + row) for row in range(rows)]


def token_records(
    logits: torch.Tensor, chosen: torch.Tensor, k: int = TOP_ALTERNATIVES
) -> tuple[list[float], list[list[tuple[int, float]]]]:
    """Per row: the model's log-probability of ``chosen`` and its top-``k``
    alternatives, from the raw (untempered) distribution. logits: (B, V); chosen: (B,)."""
    logprobs = logits.float().log_softmax(-1)  # (B, V)
    mine = logprobs.gather(1, chosen.view(-1, 1)).squeeze(1)  # (B,)
    top_lp, top_ids = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1)  # (B, k)
    top_lp, top_ids = top_lp.cpu().tolist(), top_ids.cpu().tolist()
    alts = [list(zip(ids, lps)) for ids, lps in zip(top_ids, top_lp)]
    return mine.cpu().tolist(), alts
