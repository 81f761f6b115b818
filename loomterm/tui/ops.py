"""Engine steps the editor runs in its worker thread, built from the public Loom API.

No Textual here: each function takes a Loom, does model work, and returns nodes. The
app wraps them in jobs and posts the results back as messages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomterm.errors import EmptyEditError
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.config.settings import Settings
    from loomterm.engine import Loom
    from loomterm.store import SessionData


@dataclass
class TypingRun:
    """The nodes the current run of typing made (ids), so the run keeps writing into
    them (``Loom.retype``) instead of branching at every pause. The editor starts a new
    run when the caret leaves them, a generation starts or the writer asks for a
    branch (``branch`` then makes the next edit branch even in their own text)."""

    ids: set[int] = field(default_factory=set)
    branch: bool = False


def sync_text(
    loom: Loom, node: Node, text: str, keep: int | None = None, run: TypingRun | None = None
) -> Node:
    """The node whose path reads ``text``, made from ``node``'s path: in place where
    the change lies inside the node being written (``Loom.retype``: the writer's own
    childless node, or the ``run``'s), else by the smallest splice (``Loom.edit``, a
    new branch), in the session's splice mode. Nodes a splice makes join ``run``.

    ``keep`` first cuts ``node``'s path to that many tokens (what was on screen when
    the user started typing over a generation that went on for a few more tokens).
    """
    if keep is not None and keep < node.end:
        node = loom.truncate(node, keep)
    if text == loom.text(node):
        return node
    if not text:
        return loom.root
    exact = loom.settings.splice_mode == "exact"
    run = run if run is not None else TypingRun()
    if not run.branch:
        retyped = loom.retype(node, text, exact=exact, run=run.ids)
        if retyped is not None:
            return retyped
    run.branch = False
    existing = set(loom.tree.nodes)
    if node.end == 0:
        result = loom.append(loom.root, text)
    else:
        try:
            result = loom.edit(node, text, exact=exact)
        except EmptyEditError:
            return node
    # The new branch joins the run; a node split to make room (the old text below it
    # as well as the new) does not: rewriting it would change the old branch too.
    run.ids.update(
        item.id for item in result.path() if item.id not in existing and len(item.children) <= 1
    )
    return result


def start_point(loom: Loom, node: Node, position: int, partial: str = "") -> Node:
    """Where generating from a caret starts: ``node``'s path cut to ``position`` tokens,
    plus ``partial`` text (the part of a token before the caret) when there is one."""
    if position < node.end:
        node = loom.truncate(node, position)
    if partial:
        node = loom.append(node, partial)
    return node


def set_meta(loom: Loom, node: Node, **changes: Any) -> None:
    """Change ``node.meta`` (bookmark, hidden...) through the engine, so the change is
    saved like any other. A value of None removes the key."""
    loom.set_meta(node, **changes)


def session_data(loom: Loom, name: str = "") -> SessionData:
    """The live session as :class:`~loomterm.store.SessionData`, for the exporters."""
    from loomterm.engine.text import PieceMaker
    from loomterm.sessions.session import model_record, session_of
    from loomterm.store import SessionData

    pieces = PieceMaker(loom.codec)
    vocab: dict[int, str] = {}
    for node in loom.tree.nodes.values():
        for top in node.top:
            for token, _ in top or ():
                if token not in vocab:
                    vocab[token] = pieces.piece(token)
    recorder = session_of(loom)
    if not name and recorder is not None:
        name = recorder.path.name.removesuffix(".loom")
    now = time.time()
    return SessionData(
        tree=loom.tree,
        pieces={node.id: pieces.node_pieces(node) for node in loom.tree.nodes.values()},
        cursor=loom.cursor.id,
        settings=loom.settings.as_dict(),
        contexts=loom.contexts.versions.as_dict(),
        model=model_record(loom),
        vocab=vocab,
        created=loom.root.created,
        modified=now,
        name=name,
    )


def export_session(
    loom: Loom,
    path: str,
    fmt: str,
    branch: str | None = None,
    force: bool = False,
    attribution: bool = False,
) -> str:
    """Write the session to ``path`` in ``fmt``; returns the path written. Never over
    a session; over another existing file only with ``force``
    (``export.TargetExists`` otherwise)."""
    from loomterm import export

    export.check_target(path, force)
    text = export.render(session_data(loom), fmt, branch, attribution=attribution)
    export.write_export(path, text, force)
    return path


def split_at_char(loom: Loom, node: Node, char: int) -> tuple[int, str]:
    """Where a caret at ``char`` of ``node``'s path text cuts it: ``(whole tokens
    before the caret, the caret's token's text before the caret)``."""
    pieces = loom.token_pieces(loom.tokens(node))
    offset = 0
    for position, piece in enumerate(pieces):
        if offset + len(piece) > char:
            return position, piece[: char - offset]
        offset += len(piece)
    return len(pieces), ""


# Settings that belong to one story, not to how it is sampled: a new session starts
# without them (KoboldAI's and mikupad's new story does the same).
STORY_SETTINGS = ("memory", "authors_note", "world_info")


def settings_for_new_story(loom: Loom) -> Settings:
    """``loom``'s settings with the story's own (memory, author's note, world info) back
    at their defaults."""
    defaults = type(loom.settings)()
    return loom.settings.replace(**{name: getattr(defaults, name) for name in STORY_SETTINGS})


def new_session_like(loom: Loom, name: str = "") -> tuple[Loom, str]:
    """A new, empty Loom on ``loom``'s model and settings (not its story's memory,
    author's note or world info). When ``loom`` has a session
    file, the new one gets its own (``name``, or one made from the time)."""
    from loomterm.errors import SessionError
    from loomterm.sessions.session import save_loom, session_of, session_path

    if loom.capabilities.node_kv:
        from loomterm.engine.open import runner_like

        fresh = type(loom)(runner_like(loom.runner))  # its threads and options too
    else:  # a server's runner keeps nothing per tree: the new loom shares it
        fresh = type(loom)(loom.runner)
    fresh.settings = settings_for_new_story(loom)
    if session_of(loom) is not None:
        name = name or time.strftime("chat-%Y%m%d-%H%M%S")
        path = session_path(name)
        if path.exists():
            raise SessionError(f"a session named {name!r} exists already: choose another name")
        save_loom(fresh, path)
    return fresh, name
