"""The status bar: model, device, path tokens, nodes, resident KV, speed, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.app import RenderResult
from textual.content import Content
from textual.widget import Widget

from loomterm.config.settings import Settings
from loomterm.tui.sanitize import safe_line


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
    backend: str = ""  # "torch", "llama.cpp" or "server" (``backend_name``); "" unknown
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
    saving: str = ""  # why the changes are not reaching the session file, while they are not


LINE_BAR_CSS = """
    height: 1;
    background: $panel;
    color: $text-muted;
    padding: 0 1;
    text-wrap: nowrap;
    text-overflow: ellipsis;
"""
"""The look of a one-line bar under the document (this one, the shade legend)."""


class StatusBar(Widget):
    """One line under the document.

    A plain widget rather than a ``Static``: ``Static.update`` asks for a relayout of
    the screen (its size might change), which repaints every widget; this bar's size
    never changes, so an update repaints only the bar.
    """

    DEFAULT_CSS = "StatusBar {" + LINE_BAR_CSS + "}"

    def show_status(self, info: StatusInfo) -> None:
        self._info = info
        self.refresh()

    def on_resize(self) -> None:
        self.refresh()  # another width may fit another of the layouts

    _info: StatusInfo | None = None

    @property
    def full_text(self) -> str:
        """The whole status line, as a terminal wide enough shows it."""
        return status_layouts(self._info)[0].plain if self._info is not None else ""

    def render(self) -> RenderResult:
        if self._info is None:
            return Content("")
        width = self.content_size.width
        full, *shorter = status_layouts(self._info)
        if shorter[0].cell_length <= width:
            return full  # only the settings, last, are cut (…) where they do not fit
        # The richest layout that fits; a terminal narrower than the last is cut (…).
        return next((c for c in shorter if c.cell_length <= width), shorter[-1])


def status_layouts(info: StatusInfo) -> list[Content]:
    """The status line from the fullest to the shortest: settings, then device, nodes
    and KV are left out, then the place is shortened, then the path's tokens, so a
    narrow terminal keeps what matters (the state, the model, where the caret is and
    the speed)."""
    speed = (
        f"{info.tokens_per_second:.1f} tok/s"
        if info.tokens_per_second is not None
        else "\u2014 tok/s"
    )
    if "tok/s" in info.state:
        speed = ""  # the state says it already (generating, reading): shown once
    bar = Content(" \u2502 ")
    head: list[Content] = []
    if info.saving:  # first of all, for as long as it lasts: the work is not on disk
        head += [Content.styled(info.saving, "bold $error"), bar]
    if info.read_only:  # always first: nothing typed here is saved
        label = "READ-ONLY \u00b7 changes not saved" if info.unsaved else "READ-ONLY"
        head += [Content.styled(label, "bold $error"), bar]
    if info.state:  # first, so a narrow terminal never cuts it off
        head += [Content.styled(safe_line(info.state), "bold $warning"), bar]
    model = Content.styled(safe_line(info.model), "bold")  # names from servers and files
    device = Content(f" {safe_line(device_text(info))}")
    nodes = f"{info.nodes} node{'' if info.nodes == 1 else 's'}"
    counts = f"{info.path_tokens} tok \u00b7 {nodes} \u00b7 KV {human_bytes(info.kv_bytes)}"

    def place(text: str) -> list[Content]:
        return [Content.styled(text, "$accent"), bar] if text else []

    full = [
        *head,
        model,
        device,
        bar,
        *place(info.place),
        Content(f"{counts}{then(speed)} \u2502 "),
        # Labelled: a preset named after a program (llama.cpp) is not the backend.
        Content(f"preset: {info.preset} " if info.preset else ""),
        Content(settings_summary(info.settings)),
    ]
    no_settings = [*head, model, device, bar, *place(info.place)]
    no_settings.append(Content(f"{counts}{then(speed)}"))
    short = [
        *head,
        model,
        bar,
        *place(info.place),
        Content(f"{info.path_tokens} tok{then(speed)}"),
    ]
    brief = [*head, model, bar, *place(short_place(info.place))]
    shortest = [*brief, Content(f"{info.path_tokens} tok{then(speed)}")]
    layouts = (full, no_settings, short, shortest, [*brief, Content(speed)])
    return [Content.assemble(*parts) for parts in layouts]


def then(part: str) -> str:
    """`` │ part``, or nothing for an empty part."""
    return f" \u2502 {part}" if part else ""


def device_text(info: StatusInfo) -> str:
    """Where the model runs, naming its backend once: ``cpu · torch``, ``cpu ·
    llama.cpp (4 threads)`` (the runner names it already), ``http://host · server``."""
    if not info.backend or info.backend in info.device:
        return info.device
    return f"{info.device} \u00b7 {info.backend}" if info.device else info.backend


def backend_name(record: dict[str, Any] | None) -> str:
    """The backend a model record (``Loom.model_table``'s) runs on: ``llama.cpp``,
    ``server`` or ``torch``; "" for no record (a model still loading)."""
    if not record:
        return ""
    if record.get("backend"):
        return str(record["backend"])
    return "server" if "server" in record else "torch"


def short_place(place: str) -> str:
    """``sibling 2 of 4 · depth 1`` as ``2/4 d1`` (other texts as they are)."""
    words = place.replace("\u00b7", " ").split()
    if len(words) == 6 and words[0] == "sibling" and words[2] == "of" and words[4] == "depth":
        return f"{words[1]}/{words[3]} d{words[5]}"
    return place
