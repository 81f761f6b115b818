"""Sampler presets in the editor: choosing one from the palette, and saying which."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loomterm.errors import LoomError
from loomterm.presets import Preset, describe, load_presets

if TYPE_CHECKING:
    from loomterm.tui.app import LoomApp


class PresetActions:
    """Mixed into :class:`~loomterm.tui.app.LoomApp`: ``Preset: NAME`` palette commands."""

    _presets: dict[str, Preset] | None = None

    def presets(self: LoomApp, reload: bool = False) -> dict[str, Preset]:
        """Shipped presets and the user's (``<config>/presets/*.toml``), read once (the
        palette reads them again); a file that cannot be used is named in a
        notification and skipped."""
        if self._presets is None or reload:
            self._presets, problems = load_presets()
            for problem in problems:
                self.notify(problem, severity="warning", timeout=6)
        return self._presets

    def apply_preset(self: LoomApp, name: str) -> None:
        preset = self.presets().get(name)
        if preset is None:
            self.notify(f"No preset named {name!r}", severity="warning")
            return
        chosen = preset.apply(self.loom.settings)
        try:
            self.loom.update_settings(**chosen.as_dict())
        except LoomError as exc:
            self.notify(str(exc), severity="error")
            return
        values = ", ".join(f"{k} {v}" for k, v in preset.values.items())
        self.notify(f"Preset {name}: {values}", timeout=4)
        self._refresh_status_soon()

    def preset_label(self: LoomApp) -> str:
        """``creative``, ``creative (changed)`` or ``custom``."""
        return describe(self.loom.settings, self.presets())
