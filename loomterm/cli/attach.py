"""``--attach [NAME=]MODEL``: more models on the session the editor opens.

Each is loaded (or connected to) with the command line's engine options and attached
beside the main model (``Loom.open_model``); one the session has attached already is
said and skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loomterm.config.settings import EngineOptions
from loomterm.sanitize import say

if TYPE_CHECKING:
    from loomterm.engine import Loom

# The command line's engine options an attached model takes (the device: the main one's).
ATTACH_OPTIONS = ("backend", "threads", "dtype", "quant", "n_ctx", "kv_budget")


def attach_more(
    loom: Loom,
    wanted: list[tuple[str | None, str]],
    options: EngineOptions,
    progress,
    quiet: bool = False,
) -> list[str]:
    """``--attach``: load or connect to each ``(name, model)`` and attach it (in the
    command line's dtype and quant, on the main model's device); one the session has
    attached already is said and skipped (``quiet``: not said, as under the editor).
    Returns the keys attached."""
    from loomterm.engine.loom.registry import slug
    from loomterm.progress import end_progress_line

    keys = []
    for name, source in wanted:
        already = attached_as(loom, source)
        if already is not None and quiet:
            continue
        if already is not None:
            say(f"loomterm: {source} is attached already, as {already}")
            continue
        who = name or slug(source)

        def stages(stage: str, done: int, total: int | None, who: str = who) -> None:
            progress(f"{who}: {stage}", done, total)

        try:
            key = loom.open_model(source, name, **attach_options(options, source), progress=stages)
        finally:
            if not quiet:
                end_progress_line()
        if not quiet:
            say(f"loomterm: attached {key} ({source})")
        keys.append(key)
    return keys


def attach_options(options: EngineOptions, source: str) -> dict:
    """``Loom.open_model``'s options for an attached ``source``: the command line's
    engine options (backend, threads, dtype, quant, context and KV cap; the device is
    the main model's); a server URL is its own backend and takes none of them."""
    from loomterm.engine.remote import is_server_url

    if is_server_url(source):
        return {}
    return {name: getattr(options, name) for name in ATTACH_OPTIONS}


def attached_as(loom: Loom, source: str) -> str | None:
    """The key of the attached model loaded from or served at ``source``, if any."""
    from loomterm.engine.remote import is_server_url
    from loomterm.engine.remote.http import public_url

    if is_server_url(source):
        where = public_url(source)
    else:
        path = Path(source).expanduser()
        where = str(path.resolve()) if path.exists() else source
    table = loom.model_table
    return next((key for key in loom.models if table[key].get("source") == where), None)
