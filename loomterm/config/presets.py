"""Sampler presets: named sets of sampling settings, shipped ones and the user's own.

A preset names only the samplers it cares about; applying it first puts every other
sampler back to neutral (off), so a preset always means the same thing whatever was set
before. The user's presets are TOML files in ``<config>/presets/`` (``creative.toml``:
``temperature = 1.0``, ``min_p = 0.05`` ...), named after the file; one with a shipped
name replaces it. A session remembers the preset it was set to (the ``preset``
setting) and every change made after (the settings themselves).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loomterm.config.locations import config_dir
from loomterm.config.settings import SettingError, Settings
from loomterm.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Every sampler a preset resets to its neutral value before applying its own.
_NEUTRAL_SAMPLERS = {n: s.default for n, s in Settings.SPECS.items() if s.sampling}

SHIPPED: dict[str, dict[str, Any]] = {
    # The model's own distribution: nothing cut, nothing penalised.
    "neutral": {"temperature": 1.0},
    # llama.cpp's server defaults, which mikupad and koboldcpp users know.
    "llama.cpp": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
    # Varied prose: min-p keeps it coherent, XTC and DRY keep it off the beaten track.
    "creative": {
        "temperature": 1.0,
        "min_p": 0.05,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.1,
        "dry_multiplier": 0.8,
        "dry_base": 1.75,
        "dry_allowed_length": 2,
    },
    # Close to the likeliest text, without looping.
    "precise": {
        "temperature": 0.3,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.05,
        "repetition_penalty": 1.05,
    },  # fmt: skip
}


@dataclass(frozen=True)
class Preset:
    """A named set of sampler values (``source``: "shipped" or the file it came from)."""

    name: str
    values: dict[str, Any]
    source: str = "shipped"

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with every sampler neutral, then this preset's values, and
        ``preset`` set to its name. Other settings (max tokens, N, splice mode) stay."""
        return settings.replace(**{**_NEUTRAL_SAMPLERS, **self.values, "preset": self.name})

    def matches(self, settings: Settings) -> bool:
        """Whether ``settings`` still sample exactly as this preset does."""
        return self.apply(settings).sampling() == settings.sampling()


START_PRESET = "llama.cpp"
"""The preset a new session's samplers start from (then the model's own values)."""
# generation_config fields that are loomterm samplers of the same meaning.
MODEL_KEYS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repetition_penalty")


def config_sampling(config: Any) -> dict[str, Any]:
    """The sampling values a model's ``generation_config`` sets (and loomterm can
    take); empty for None or a config that sets none."""
    if config is None:
        return {}
    values: dict[str, Any] = {}
    for key in MODEL_KEYS:
        value = getattr(config, key, None)
        if value is None:
            continue
        try:
            values[key] = Settings.spec(key).check(value)
        except SettingError:
            continue  # a value loomterm would refuse: not a default worth starting from
    return values


def starting_samplers(settings: Settings, config: Any = None) -> Settings:
    """``settings`` with the samplers a new session starts from: the llama.cpp preset
    (the user's file of that name, if any), then whatever the model's
    ``generation_config`` sets."""
    preset = load_presets()[0].get(START_PRESET) or Preset(START_PRESET, SHIPPED[START_PRESET])
    started = preset.apply(settings)
    from_model = config_sampling(config)
    if from_model:
        started = started.replace(**from_model)
        if not preset.matches(started):
            started = started.replace(preset="")  # no longer the preset as it ships
    return started


def presets_dir() -> Path:
    return config_dir() / "presets"


def load_presets(folder: Path | None = None) -> tuple[dict[str, Preset], list[str]]:
    """Shipped presets and the user's, by name, and one warning line per file that could
    not be used (it is skipped; nothing else changes)."""
    presets = {name: Preset(name, dict(values)) for name, values in SHIPPED.items()}
    warnings: list[str] = []
    folder = presets_dir() if folder is None else folder
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
        try:
            presets[path.stem] = read_preset(path)
        except InputError as exc:
            warnings.append(str(exc))
    return presets, warnings


def read_preset(path: Path) -> Preset:
    """One user preset file, checked: only sampler settings, each valid."""
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"preset {path.name} cannot be read: {exc}") from None
    for name in values:
        spec = Settings.SPECS.get(name)
        if spec is None or not spec.sampling:
            raise InputError(f"preset {path.name}: {name!r} is not a sampler setting")
    try:
        Settings().replace(**values)
    except SettingError as exc:
        raise InputError(f"preset {path.name}: {exc}") from None
    return Preset(path.stem, dict(values), str(path))


def describe(settings: Settings, presets: dict[str, Preset]) -> str:
    """``creative``, ``creative (changed)``, or ``custom``: for the status bar."""
    preset = presets.get(settings.preset)
    if preset is None:
        return "custom"
    return preset.name if preset.matches(settings) else f"{preset.name} (changed)"
