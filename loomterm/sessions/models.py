"""A reopened session's other models: attach again the ones that were attached when it
was last changed, and make the one that was active active again.

The session file keeps, beside the model table (key to record, ``engine.loom.registry``),
``model_state``: ``{"active": key, "attached": [keys]}``. A file written before that
was kept has no state: then every recorded model is tried. A model that cannot be
reopened (its folder is gone, its server does not answer, it is another model now)
stays recorded, with its nodes and its colour, and gets a one-line note; it stays in
``attached`` too, so the next open tries it again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.store import SessionData


def reattach_models(
    loom: Loom,
    data: SessionData,
    progress: Callable[..., None] | None = None,
    on_note: Callable[[str], None] | None = None,
    loaded: Sequence[Any] = (),
    name: str = "",
    threads: int | None = None,
) -> list[str]:
    """Re-attach the models ``data`` had attached to ``loom`` (which has adopted its
    table and state: ``Loom.adopt_models``; local ones with ``threads``, as the
    session's own model) and restore the active one; returns the notes of those that
    did not come back (each to ``on_note`` as it happens; by default a warning naming
    the session, ``name``)."""
    if on_note is None:

        def on_note(note: str) -> None:
            warnings.warn(f"session {name}: {note}" if name else note, stacklevel=4)

    state = data.model_state if isinstance(data.model_state, dict) else {}
    notes = loom.reopen_models(progress=progress, on_note=on_note, loaded=loaded, threads=threads)
    active = state.get("active")
    if isinstance(active, str) and active in loom.models and active != loom.active_model:
        loom.use(active)
    return notes
