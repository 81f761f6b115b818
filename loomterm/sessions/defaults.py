"""Where a new session's sampling starts, and where each value came from.

A new session samples as llama.cpp's server does by default (the ``llama.cpp`` preset:
temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), which mikupad and koboldcpp users
know, unless the model's own ``generation_config`` names a value: then the model's.
(``Settings``' own defaults are neutral, the model's raw distribution, which a small
model turns into gibberish.)

:func:`sources` tells the settings dialog, per sampler, where the value it shows came
from: the model, the preset, loomterm's neutral default, or a change made for this
session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loomterm.config.presets import (
    SHIPPED,
    START_PRESET,
    config_sampling,
    starting_samplers,
)
from loomterm.config.settings import Settings

if TYPE_CHECKING:
    from loomterm.engine import Loom

FROM_MODEL = "the model's generation_config"
FROM_PRESET = "{} default"  # "llama.cpp default", "creative default"
NEUTRAL = "off (loomterm's neutral)"
CHANGED = "set for this session"


def generation_config(loom: Loom) -> Any:
    """The local model's ``generation_config`` (None on a server)."""
    loaded = getattr(loom.runner, "loaded", None)
    return getattr(getattr(loaded, "model", None), "generation_config", None)


def model_sampling(loom: Loom) -> dict[str, Any]:
    """The sampling values the model's ``generation_config`` sets (and loomterm can
    take); empty when it sets none or the runner has no local model."""
    return config_sampling(generation_config(loom))


def starting_settings(loom: Loom) -> Settings:
    """``loom``'s settings with the samplers a new session starts from: the llama.cpp
    preset, then whatever the model's generation_config sets."""
    return starting_samplers(loom.settings, generation_config(loom))


def start_new_session(loom: Loom) -> None:
    """Give a brand-new session's ``loom`` its starting samplers (before it is saved)."""
    loom.settings = starting_settings(loom)


def sources(loom: Loom, settings: Settings | None = None) -> dict[str, str]:
    """Per sampler, where the value of ``settings`` (default: the loom's) came from."""
    settings = settings if settings is not None else loom.settings
    from_model = model_sampling(loom)
    preset_name = settings.preset or ""
    preset_values = SHIPPED.get(preset_name, {}) if preset_name else {}
    if preset_name and preset_name not in SHIPPED:
        from loomterm.config.presets import load_presets

        found = load_presets()[0].get(preset_name)
        preset_values = found.values if found is not None else {}
    start = SHIPPED[START_PRESET]
    out: dict[str, str] = {}
    for name, spec in Settings.SPECS.items():
        if not spec.sampling:
            continue
        value = getattr(settings, name)
        if name in from_model and value == from_model[name]:
            out[name] = FROM_MODEL
        elif name in preset_values and value == preset_values[name]:
            out[name] = FROM_PRESET.format(preset_name)
        elif not preset_name and name in start and value == start[name]:
            out[name] = FROM_PRESET.format(START_PRESET)
        elif value == spec.default:
            out[name] = NEUTRAL
        else:
            out[name] = CHANGED
    return out
