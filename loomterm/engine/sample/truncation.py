"""Stages 5-10 of the sampling chain: truncation (top-n-sigma, top-k, typical, top-p,
min-p), XTC, dynamic temperature, and mirostat v2 (``sample.chain``). Pure functions of
logits (B, V).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from loomterm.engine.sample.params import SamplingParams


# -- stages 5-8: truncation ------------------------------------------------------------------
def top_n_sigma_filter(logits: torch.Tensor, n: float) -> torch.Tensor:
    """Top-n-sigma (Tang et al., 2024; llama.cpp's ``top-n-sigma``): keep the tokens
    whose logit is at least ``max - n * std``, the standard deviation (population, as
    llama.cpp) over the row's candidates left (finite logits). ``n <= 0`` is off.
    Scaling a row by a temperature scales ``max`` and ``std`` alike, so the kept set is
    the same before or after the temperature. logits: (B, V) float."""
    if n <= 0:
        return logits
    # A row with no candidate left gets a NaN floor, and NaN compares false: unchanged.
    finite = torch.isfinite(logits)  # (B, V)
    count = finite.sum(-1, keepdim=True)  # (B, 1)
    values = logits.masked_fill(~finite, 0.0)
    mean = values.sum(-1, keepdim=True) / count  # (B, 1)
    spread = ((values - mean).square() * finite).sum(-1, keepdim=True) / count
    floor = logits.amax(-1, keepdim=True) - n * spread.sqrt()  # (B, 1)
    return logits.masked_fill(logits < floor, float("-inf"))


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


# -- mirostat v2 ----------------------------------------------------------------------------------
def mirostat_v2_filter(logits: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """Keep the tokens whose surprise ``-log2 p`` is at most the row's ``mu``, and at
    least the most likely one (llama.cpp's ``mirostat-v2``). logits: (B, V) float
    (already tempered); mu: (B,)."""
    surprise = -logits.log_softmax(-1) / math.log(2)  # (B, V)
    keep = surprise <= mu.to(logits.device).reshape(-1, 1)
    keep = keep.scatter(1, logits.argmax(-1, keepdim=True), True)
    return logits.masked_fill(~keep, float("-inf"))
