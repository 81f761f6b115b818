"""Sampler presets in the editor: choosing one from the palette, and saying which."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomterm.config.presets import Preset, describe, load_presets
from loomterm.errors import LoomError

if TYPE_CHECKING:
    from loomterm.tui.controllers.editor import Editor


@dataclass(eq=False, repr=False)
class Presets:
    """``Preset: NAME`` palette commands; the presets, read once."""

    app: Editor
    known: dict[str, Preset] | None = field(default=None, init=False)  # None: not read yet

    def listed(self, reload: bool = False) -> dict[str, Preset]:
        """Shipped presets and the user's (``<config>/presets/*.toml``), read once (the
        palette reads them again); a file that cannot be used is named in a
        notification and skipped."""
        if self.known is None or reload:
            self.known, problems = load_presets()
            for problem in problems:
                self.app.notify(problem, severity="warning", timeout=6)
        return self.known

    def apply(self, name: str) -> None:
        """Use the preset ``name``'s settings (saved with the session)."""
        app = self.app
        preset = self.listed().get(name)
        if preset is None:
            app.notify(f"No preset named {name!r}", severity="warning")
            return
        chosen = preset.apply(app.loom.settings)
        try:
            app.loom.update_settings(**chosen.as_dict())
        except LoomError as exc:
            app.notify(str(exc), severity="error")
            return
        values = ", ".join(f"{k} {v}" for k, v in preset.values.items())
        app.notify(f"Preset {name}: {values}", timeout=4)
        app.status_line.soon()

    def label(self) -> str:
        """``creative``, ``creative (changed)`` or ``custom``."""
        return describe(self.app.loom.settings, self.listed())
