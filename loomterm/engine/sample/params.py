"""What one generation's sampler is asked to do: :class:`SamplingParams`.

The knobs by llama.cpp's names, neutral by default (each stage off), checked against
the sampler settings' own ranges (``loomterm.config.settings``), and what the chain
(``sample.chain``) reads of them: greedy or not, which stages run, whether a step
reads the path's tokens (``uses_history``) and whether its law depends on the prefix
alone (``verifiable``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from loomterm.config.settings import Settings
from loomterm.errors import InputError

# llama.cpp's defaults for the DRY sequence breakers (``common/common.h``).
DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")
NEVER = "never"
Bias = float | str  # a float, or "never"


def normalise_bias(value) -> tuple[tuple[int, float], ...]:
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


TOP_ALTERNATIVES = 10
# The fields checked by the sampler settings' specs: all but ``logit_bias``, which the
# engine holds by token id and a setting by token id or text.
_RANGE_CHECKED = tuple(
    name for name, spec in Settings.SPECS.items() if spec.sampling and name != "logit_bias"
)


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
    # -- issue 23 --
    top_n_sigma: float = -1.0
    logit_bias: tuple[tuple[int, float], ...] = field(default=())

    def __post_init__(self) -> None:
        # The ranges are the sampler settings' own (``loomterm.config.settings``), so the
        # dialog, the command line and the engine refuse the same values, in the same
        # words; each value comes back in its field's type (``top_k=40.0`` is 40).
        for name in _RANGE_CHECKED:
            object.__setattr__(self, name, Settings.spec(name).check(getattr(self, name)))
        # An empty breaker matches nothing: skipped, as llama.cpp skips it (so a preset
        # with a stray "" works the same here). The bias is held by token id here, by
        # id or text in a setting.
        breakers = tuple(b for b in self.dry_sequence_breakers if b)
        object.__setattr__(self, "dry_sequence_breakers", breakers)
        object.__setattr__(self, "logit_bias", normalise_bias(self.logit_bias))

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
            "top_n_sigma": self.top_n_sigma,
            "logit_bias": {
                str(token): NEVER if math.isinf(bias) else bias for token, bias in self.logit_bias
            },
        }
        return out
