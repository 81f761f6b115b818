"""Sampling as pure functions of logits (in the spirit of gpt-fast's ``generate.py``).

Order of the warpers follows llama.cpp and transformers: repetition penalty, then
temperature, then top-k, top-p and min-p filtering. ``temperature == 0`` is greedy.
Random draws happen on the CPU with one ``torch.Generator`` per row, so a seed gives
the same sample on any device and whatever the batch size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from loomterm.errors import InputError
from loomterm.settings import DEFAULTS

TOP_ALTERNATIVES = 10


@dataclass(frozen=True)
class SamplingParams:
    """The knobs of one generation. Their defaults live in :class:`loomterm.settings.Settings`
    (each field here is one of its ``sampler`` fields)."""

    temperature: float = DEFAULTS.temperature
    top_p: float = DEFAULTS.top_p
    top_k: int = DEFAULTS.top_k
    min_p: float = DEFAULTS.min_p
    repetition_penalty: float = DEFAULTS.repetition_penalty

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def as_dict(self) -> dict:
        return asdict(self)


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


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature-scaled logits with filtered-out tokens at -inf. logits: (B, V)."""
    logits = logits.float() / max(params.temperature, 1e-6)  # (B, V)
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # (B, V)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token once the mass before it already reaches top_p; the best always stays.
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= params.top_p
        drop = drop_sorted.scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if params.min_p > 0.0:
        probs = logits.softmax(-1)
        floor = params.min_p * probs.amax(-1, keepdim=True)  # (B, 1)
        logits = logits.masked_fill(probs < floor, float("-inf"))
    return logits


def sampling_probs(
    logits: torch.Tensor, params: SamplingParams, history: torch.Tensor | None = None
) -> torch.Tensor:
    """The distribution tokens are drawn from: (B, V) float32. For greedy it is one-hot
    on the argmax."""
    if history is not None:
        logits = apply_repetition_penalty(logits, history, params.repetition_penalty)
    if params.greedy:
        probs = torch.zeros_like(logits, dtype=torch.float32)
        return probs.scatter_(1, logits.argmax(-1, keepdim=True), 1.0)
    return filter_logits(logits, params).softmax(-1)


def draw(probs: torch.Tensor, generators: list[torch.Generator] | None) -> torch.Tensor:
    """One token per row from ``probs`` (B, V). Returns (B,) on probs' device."""
    cpu = probs.detach().float().cpu()
    if generators is None:
        return torch.multinomial(cpu, 1).squeeze(1).to(probs.device)
    picks = [torch.multinomial(cpu[b], 1, generator=g) for b, g in enumerate(generators)]
    return torch.cat(picks).to(probs.device)


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    generators: list[torch.Generator] | None = None,
    history: torch.Tensor | None = None,
) -> torch.Tensor:
    """Next token per row. logits: (B, V) -> (B,) token ids."""
    if params.greedy:
        if history is not None:
            logits = apply_repetition_penalty(logits, history, params.repetition_penalty)
        return logits.argmax(-1)
    return draw(sampling_probs(logits, params, history), generators)


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
