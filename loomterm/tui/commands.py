"""The command palette (ctrl+p): every action by name, every theme, every bookmark; and
the Theme command's own list (:class:`ThemeCommands`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from loomterm.tui.keymap import ACTIONS

if TYPE_CHECKING:
    from loomterm.tui.controllers.bookmarks import Bookmarks
    from loomterm.tui.controllers.looks import Looks
    from loomterm.tui.controllers.models import Models
    from loomterm.tui.controllers.navigation import Navigation
    from loomterm.tui.controllers.presets import Presets
    from loomterm.tui.controllers.swap import Swap

Command = tuple[str, Callable[[], object], str]  # (title, run, help)


class PaletteApp(Protocol):
    """What the palette uses of the app (:class:`~loomterm.tui.app.LoomApp`): its
    controllers and two of Textual's ``App`` methods."""

    looks: Looks
    presets: Presets
    models: Models
    bookmarks: Bookmarks
    navigation: Navigation
    swap: Swap

    async def run_action(self, action: str) -> bool: ...
    def set_theme(self, name: str) -> None: ...


class LoomCommands(Provider):
    """Actions from :data:`~loomterm.tui.keymap.ACTIONS` (with their current keys),
    ``Preset: NAME`` for every sampler preset, ``Theme: NAME`` for every theme and
    ``Bookmark: TEXT`` for every bookmark."""

    @property
    def loom_app(self) -> PaletteApp:
        return cast("PaletteApp", self.app)

    def commands(self) -> Iterator[Command]:
        app = self.loom_app
        keys = app.looks.keys_by_id()
        for action in ACTIONS:
            key = keys.get(action.id, "")
            help_text = f"{action.help}  ({key})" if key else action.help
            yield action.title, partial(app.run_action, action.action), help_text
        for name, preset in app.presets.listed().items():
            values = ", ".join(f"{k} {v}" for k, v in preset.values.items())
            preset_run = partial(
                app.swap.when_model_ready, partial(app.presets.apply, name), "Preset"
            )
            yield f"Preset: {name}", preset_run, values
        for key in app.models.attached():
            use = partial(app.swap.when_model_ready, partial(app.models.use, key), "Model")
            yield f"Model: {key}", use, "Make this model the active one"
        yield (
            "Model details",
            app.models.show_details,
            "Every model of the tree; for a server, its key's source, headers and body fields",
        )
        for name in app.looks.theme_names():
            yield f"Theme: {name}", partial(app.set_theme, name), "Switch to this theme"
        for node, preview in app.bookmarks.listed():
            yield f"Bookmark: {preview}", partial(app.navigation.go_to, node), "Go to this bookmark"

    async def startup(self) -> None:
        self.loom_app.presets.listed(reload=True)  # a preset file written since is offered too

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
        app = cast("PaletteApp", self.app)
        for name in app.looks.theme_names():
            yield DiscoveryHit(name, partial(app.set_theme, name), help="Switch to this theme")

    async def search(self, query: str) -> Hits:
        app = cast("PaletteApp", self.app)
        matcher = self.matcher(query)
        for name in app.looks.theme_names():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(app.set_theme, name))
