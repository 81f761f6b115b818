"""The status bar: model, device, path tokens, nodes, resident KV, speed, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.app import RenderResult
from textual.content import Content
from textual.widget import Widget

from loomterm.settings import Settings


def human_bytes(count: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


def settings_summary(settings: Settings) -> str:
    """The sampling settings in a few characters each."""

    def num(value: Any) -> str:
        return f"{float(value):g}"

    return (
        f"T{num(settings.temperature)} "
        f"p{num(settings.top_p)} "
        f"k{settings.top_k} "
        f"minp{num(settings.min_p)} "
        f"max{settings.max_new_tokens} "
        f"n{settings.n} "
        f"{settings.splice_mode}"
    )


@dataclass
class StatusInfo:
    """Everything the status bar shows."""

    model: str = ""
    device: str = ""
    path_tokens: int = 0
    nodes: int = 0
    kv_bytes: int = 0
    tokens_per_second: float | None = None
    settings: Settings = field(default_factory=Settings)
    preset: str = ""  # "creative", "creative (changed)"; "" when none was chosen
    state: str = ""
    read_only: bool = False
    unsaved: bool = False  # a read-only session holds changes that are not saved
    place: str = ""  # where the caret's branch stands: "sibling 2 of 4 · depth 1"


class StatusBar(Widget):
    """One line under the document.

    A plain widget rather than a ``Static``: ``Static.update`` asks for a relayout of
    the screen (its size might change), which repaints every widget; this bar's size
    never changes, so an update repaints only the bar.
    """

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text-muted;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def show_status(self, info: StatusInfo) -> None:
        speed = (
            f"{info.tokens_per_second:.1f} tok/s"
            if info.tokens_per_second is not None
            else "\u2014 tok/s"
        )
        parts = []
        if info.read_only:  # always first: nothing typed here is saved
            label = "READ-ONLY \u00b7 changes not saved" if info.unsaved else "READ-ONLY"
            parts += [Content.styled(label, "bold $error"), Content(" \u2502 ")]
        if info.state:  # first, so a narrow terminal never cuts it off
            parts += [Content.styled(info.state, "bold $warning"), Content(" \u2502 ")]
        parts += [
            Content.styled(info.model, "bold"),
            Content(f" {info.device} \u2502 "),
            *([Content.styled(info.place, "$accent"), Content(" \u2502 ")] if info.place else []),
            Content(
                f"{info.path_tokens} tok \u00b7 {info.nodes} node{'' if info.nodes == 1 else 's'} \u00b7 "
                f"KV {human_bytes(info.kv_bytes)} \u2502 {speed} \u2502 "
            ),
            Content(f"{info.preset} " if info.preset else ""),
            Content(settings_summary(info.settings)),
        ]
        self._content = Content.assemble(*parts)
        self.refresh()

    _content: Content = Content("")

    def render(self) -> RenderResult:
        return self._content
