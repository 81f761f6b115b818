"""The command palette (ctrl+p): every action by name, every theme, every bookmark; and
the Theme command's own list (:class:`ThemeCommands`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from loomterm.tui.keymap import ACTIONS

if TYPE_CHECKING:
    from loomterm.tui.app import LoomApp

Command = tuple[str, Callable[[], object], str]  # (title, run, help)


class LoomCommands(Provider):
    """Actions from :data:`~loomterm.tui.keymap.ACTIONS` (with their current keys),
    ``Preset: NAME`` for every sampler preset, ``Theme: NAME`` for every theme and
    ``Bookmark: TEXT`` for every bookmark."""

    @property
    def loom_app(self) -> LoomApp:
        return cast("LoomApp", self.app)

    def commands(self) -> Iterator[Command]:
        app = self.loom_app
        keys = app.keys_by_id()
        for action in ACTIONS:
            key = keys.get(action.id, "")
            help_text = f"{action.help}  ({key})" if key else action.help
            yield action.title, partial(app.run_action, action.action), help_text
        for name, preset in app.presets().items():
            values = ", ".join(f"{k} {v}" for k, v in preset.values.items())
            preset_run = partial(app.when_model_ready, partial(app.apply_preset, name), "Preset")
            yield f"Preset: {name}", preset_run, values
        for key in app.attached_models():
            use = partial(app.when_model_ready, partial(app.use_model, key), "Model")
            yield f"Model: {key}", use, "Make this model the active one"
        for name in app.theme_names():
            yield f"Theme: {name}", partial(app.set_theme, name), "Switch to this theme"
        for node, preview in app.bookmarks():
            yield f"Bookmark: {preview}", partial(app.go_to_node, node), "Go to this bookmark"

    async def startup(self) -> None:
        self.loom_app.presets(reload=True)  # a preset file written since is offered too

    async def discover(self) -> Hits:
        for title, run, help_text in self.commands():
            if not title.startswith(("Theme:", "Bookmark:", "Preset:", "Model:")):
                yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, run, help_text in self.commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)


class ThemeCommands(Provider):
    """The Theme command's list: loomterm's themes first, then the user's."""

    async def discover(self) -> Hits:
        app = cast("LoomApp", self.app)
        for name in app.theme_names():
            yield DiscoveryHit(name, partial(app.set_theme, name), help="Switch to this theme")

    async def search(self, query: str) -> Hits:
        app = cast("LoomApp", self.app)
        matcher = self.matcher(query)
        for name in app.theme_names():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(app.set_theme, name))
