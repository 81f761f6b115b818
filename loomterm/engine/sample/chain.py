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
 4b. top-n-sigma ``top_n_sigma``: keep the logits within ``n`` standard deviations of
                the best (over the candidates left); ``<= 0`` is off
 5. top-k       ``top_k``
 6. typical     ``typical_p``
 7. top-p       ``top_p``
 8. min-p       ``min_p``
 9. XTC         ``xtc_probability``, ``xtc_threshold``: on the row's coin
10. dynatemp    ``dynatemp_range``, ``dynatemp_exponent``: a temperature in
                ``[max(0, T - range), T + range]`` from the entropy of what is left
11. draw        one draw from the row's generator (after the XTC coin, when XTC is on)

 With ``mirostat == 2`` (mirostat v2 replaces stages 4b-10, as in llama.cpp):

 4. temperature
 5. mirostat v2 keep the tokens whose surprise ``-log2 p`` is at most the row's ``mu``
                (at least the most likely one), renormalise, draw; then
                ``mu -= mirostat_eta * (-log2 p(chosen) - mirostat_tau)`` (``advance``)

Against llama.cpp's default chain (penalties, DRY, top-n-sigma, top-k, typical, top-p,
min-p, XTC, temperature): the same order, except that a plain ``temperature`` comes
before the truncation samplers, as in transformers and as loomterm always did.
Top-n-sigma reads the same set either side of a temperature (scaling a row scales its
max and its standard deviation alike), so it sits where llama.cpp has it: first of the
truncation samplers, before top-k. So with
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

``sample.ahead.DrawAhead`` draws a row's coming draws (the XTC coin, then the
token's exponential race: what ``draw``'s ``torch.multinomial`` draws) before their
distributions are known; ``sample_step(..., ahead=...)`` spends them in order and picks
the same tokens as drawing then would. Drafted decoding reads them to guess.

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

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from loomterm.engine.sample.ahead import DrawAhead, race_pick
from loomterm.engine.sample.params import (
    DRY_SEQUENCE_BREAKERS,
    NEVER,
    TOP_ALTERNATIVES,
    Bias,
    SamplingParams,
)
from loomterm.engine.sample.penalties import (
    DRY_MAX_BREAKER_CHARS,
    DRY_MAX_TAIL_TOKENS,
    DryBreakers,
    History,
    apply_dry,
    apply_logit_bias,
    apply_penalties,
    apply_repetition_penalty,
    dry_penalty,
    dry_repeat_lengths,
    logit_bias_from_strings,
    resolve_dry_breakers,
    resolve_logit_bias,
    token_counts,
)
from loomterm.engine.sample.reduce import argmax_rows
from loomterm.engine.sample.truncation import (
    apply_dynatemp,
    dynatemp_temperatures,
    min_p_filter,
    mirostat_v2_filter,
    top_k_filter,
    top_n_sigma_filter,
    top_p_filter,
    typical_filter,
    xtc_coins,
    xtc_filter,
)


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
    what ``decode.draft_tree.accept_walk`` does: then XTC's coin and the token come out of the
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
    logits = top_n_sigma_filter(logits, params.top_n_sigma)
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
    ahead: list[DrawAhead] | None = None,
) -> tuple[torch.Tensor, SamplerState]:
    """Next token per row, and the state after it. logits: (B, V) -> (B,) token ids.

    ``history``: each row's path so far (typed text included), (B, T) or one sequence
    per row, needed when ``params.uses_history``. ``state``: from ``SamplerState.start``
    (or the previous step); None starts a fresh one (without DRY breakers).
    ``ahead``: each row's draws drawn ahead (``sample.ahead.DrawAhead``, made from the
    row's generator), spent instead of drawing from ``generators``: the same tokens.
    """
    if state is None:
        state = SamplerState.start(params, logits.shape[0], logits.device)
    if params.greedy:
        return argmax_rows(adjust_logits(logits, params, history, state)), state
    if ahead is None:
        coins = xtc_coins(params, generators, logits.shape[0])
        probs = sampling_probs(logits, params, history, state, coins)
        chosen = draw(probs, generators)
    else:
        drawn = [row.take() for row in ahead]
        coins = torch.cat([coin for coin, _ in drawn]) if params.xtc_active else None
        probs = sampling_probs(logits, params, history, state, coins)
        chosen = race_pick(probs, [race for _, race in drawn])
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


def token_record_tensor(
    logits: torch.Tensor, chosen: torch.Tensor, k: int = TOP_ALTERNATIVES
) -> torch.Tensor:
    """What ``token_records`` reads, packed on the logits' device so that one transfer
    brings it to the host: (B, 2 + 2k) float32 rows of ``[chosen, logprob(chosen),
    k top ids, k top logprobs]`` (token ids below 2^24 are exact in float32). The
    log-probabilities are of the raw (untempered) distribution: on the GPU
    ``logit - logsumexp``, without materialising the (B, V) log-softmax; on the CPU from
    the log-softmax, in three operations instead of seven."""
    logits = logits.float()
    k = min(k, logits.shape[-1])
    chosen = chosen.view(-1, 1).to(logits.device)  # (B, 1)
    if logits.device.type == "cpu":
        # Few operations: right after a llama.cpp step has swept the caches each costs
        # 20-40 us, more than its arithmetic; and torch's logsumexp is not vectorised.
        logprobs = torch.log_softmax(logits, -1)  # (B, V)
        top_logprobs, top_ids = logprobs.topk(k, dim=-1)  # (B, k)
        mine = logprobs.gather(1, chosen)  # (B, 1)
    else:
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)  # (B, 1)
        mine = logits.gather(1, chosen) - lse  # (B, 1)
        top_logits, top_ids = logits.topk(k, dim=-1)  # (B, k)
        top_logprobs = top_logits - lse
    return torch.cat([chosen.to(logits), mine, top_ids.to(logits), top_logprobs], dim=1)


def unpack_token_records(
    rows: list[list[float]],
) -> tuple[list[int], list[float], list[list[tuple[int, float]]]]:
    """``token_record_tensor(...).tolist()`` back into (chosen, logprobs, alternatives)."""
    picks, logprobs, alternatives = [], [], []
    for row in rows:
        k = (len(row) - 2) // 2
        picks.append(int(row[0]))
        logprobs.append(row[1])
        alternatives.append(list(zip(map(int, row[2 : 2 + k]), row[2 + k :])))
    return picks, logprobs, alternatives


def token_records(
    logits: torch.Tensor, chosen: torch.Tensor, k: int = TOP_ALTERNATIVES
) -> tuple[list[float], list[list[tuple[int, float]]]]:
    """Per row: the model's log-probability of ``chosen`` and its top-``k``
    alternatives, from the raw (untempered) distribution. logits: (B, V); chosen: (B,).
    One host transfer (``token_record_tensor``)."""
    _, logprobs, alternatives = unpack_token_records(
        token_record_tensor(logits, chosen, k).tolist()
    )
    return logprobs, alternatives


# The chain's stages live in ``sample.penalties`` (1-3) and ``sample.truncation`` (5-10); they are
# named here too, so ``sample.chain`` stays the one place to import a sampler from.
__all__ = [
    "DRY_MAX_BREAKER_CHARS",
    "DRY_MAX_TAIL_TOKENS",
    "DRY_SEQUENCE_BREAKERS",
    "NEVER",
    "TOP_ALTERNATIVES",
    "Bias",
    "DrawAhead",
    "DryBreakers",
    "History",
    "SamplerState",
    "SamplingParams",
    "adjust_logits",
    "advance",
    "apply_dry",
    "apply_dynatemp",
    "apply_logit_bias",
    "apply_penalties",
    "apply_repetition_penalty",
    "draw",
    "dry_penalty",
    "dry_repeat_lengths",
    "dynatemp_temperatures",
    "filter_logits",
    "logit_bias_from_strings",
    "make_generators",
    "min_p_filter",
    "mirostat_v2_filter",
    "race_pick",
    "resolve_dry_breakers",
    "resolve_logit_bias",
    "sample",
    "sample_step",
    "sampling_probs",
    "token_counts",
    "token_record_tensor",
    "token_records",
    "top_k_filter",
    "top_n_sigma_filter",
    "top_p_filter",
    "typical_filter",
    "unpack_token_records",
    "xtc_coins",
    "xtc_filter",
]
