"""Keeping a session's changes while its file cannot take them, and writing them back.

The recorder's other half (``loomterm.sessions.recorder``): once a write to the session
file fails, every change is appended to the session's journal
(``loomterm.store.journal``) by a :class:`Keeper`, and the try that works writes the
whole live session over the file (:func:`whole_data`) and deletes the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from loomterm.engine.events import Event
from loomterm.engine.text import PieceMaker
from loomterm.errors import SessionError
from loomterm.store import Caret, SessionData, SessionStore, Typed
from loomterm.store.journal import Journal, node_head, node_state, token_state
from loomterm.tree import Node

if TYPE_CHECKING:
    from loomterm.engine import Loom

T = TypeVar("T")


@dataclass(frozen=True)
class SaveState:
    """Whether a session's changes reach its file (what the status bar shows).

    Attributes:
        error: Why the file cannot be written now ("" while it can).
        journal: Where the changes are kept meanwhile (None: in memory only).
        journal_error: Why the journal could not be written either ("" when it could).
        retry_at: ``time.monotonic()`` of the next try (None when none is due).
    """

    error: str = ""
    journal: Path | None = None
    journal_error: str = ""
    retry_at: float | None = None

    @property
    def ok(self) -> bool:
        return not self.error


def alternative_ids(nodes: Iterable[Node], start: dict[int, int] | None = None) -> set[int]:
    """The token ids among the alternatives of ``nodes`` (from ``start[node.id]`` on)."""
    ids: set[int] = set()
    for node in nodes:
        first = start.get(node.id, 0) if start else 0
        for top in node.top[first:]:
            if top:
                ids.update(int(t) for t, _ in top)
    return ids


def answer(
    owner: T,
    event: Event,
    node: Node | None,
    per_node: Mapping[Event, Callable[[T, Node], None]],
    whole: Mapping[Event, Callable[[T], None]],
) -> None:
    """Run what ``per_node`` (a change to one node) or ``whole`` (to the session as a
    whole) says ``owner`` does for ``event``; nothing for an event neither names."""
    if event in per_node:
        if node is not None:
            per_node[event](owner, node)
    elif event in whole:
        whole[event](owner)


def settled(node: Node) -> int:
    """How many tokens of ``node`` all three of its lists already hold (the engine may
    be appending from another thread)."""
    return min(len(node.tokens), len(node.logprobs), len(node.top))


@dataclass
class Kept:
    """What the journal holds of one node: the fields of its last ``node`` line and
    its tokens with their records as its lines left them (copies: the node changes)."""

    head: dict
    tokens: list
    logprobs: list
    top: list

    @classmethod
    def of(cls, node: Node, end: int, head: dict) -> Kept:
        return cls(head, list(node.tokens[:end]), list(node.logprobs[:end]), list(node.top[:end]))

    def replace_from(self, node: Node, start: int, end: int) -> None:
        """A ``tokens`` line put ``node``'s tokens ``start:end`` in place of those from
        ``start`` on."""
        del self.tokens[start:], self.logprobs[start:], self.top[start:]
        self.tokens += node.tokens[start:end]
        self.logprobs += node.logprobs[start:end]
        self.top += node.top[start:end]

    def same_until(self, node: Node, end: int) -> int:
        """How many of ``node``'s first ``end`` tokens, records included, the journal
        holds as they are."""
        limit = min(end, len(self.tokens))
        for i in range(limit):
            if (
                node.tokens[i] != self.tokens[i]
                or node.logprobs[i] != self.logprobs[i]
                or node.top[i] != self.top[i]
            ):
                return i
        return limit


def take(pending: dict[int, Node]) -> list[Node]:
    """Empty ``pending`` (the nodes whose generated tokens wait for a write); its nodes."""
    nodes = list(pending.values())
    pending.clear()
    return nodes


class Keeper:
    """Appends to a session's journal what its file lacks, while the file refuses writes.

    It shares the recorder's books, the same objects: ``stored`` (node id -> tokens the
    file holds), ``pending`` (nodes whose generated tokens wait for a write) and
    ``vocab`` (token ids whose text the file or the journal holds). ``buffer`` is the
    recorder's own way to wait for more tokens (its flush timer); ``tell`` lets whoever
    shows the save state hear that the journal failed or works again.

    Attributes:
        journal: The session's journal.
        error: Why the journal cannot be written either ("" while it can).
        journaled: Node id -> tokens the journal holds.
        kept: Node id -> what the journal holds of it (:class:`Kept`), for the nodes it
            has a ``node`` line of: a change to such a node is journaled from its first
            changed token (typing on a full disk writes a few tokens a key, not the
            whole node).
    """

    def __init__(
        self,
        loom: Loom,
        path: Path,
        pieces: PieceMaker,
        books: tuple[dict[int, int], dict[int, Node], set[int]],
        buffer: Callable[[], None],
        tell: Callable[[], None],
    ) -> None:
        self.loom = loom
        self.journal = Journal(path)
        self.error = ""
        self.journaled: dict[int, int] = {}
        self.kept: dict[int, Kept] = {}
        self.pieces = pieces
        self.stored, self.pending, self.vocab = books
        self._buffer = buffer
        self._tell = tell

    def begin(self) -> None:
        """The file refused a write: journal what it lacks, the tokens not written yet
        and the change that failed (its node's whole state, whatever part of it reached
        the file)."""
        self.journaled = dict(self.stored)
        for each in list(self.loom.tree.nodes.values()):
            if each.id in self.pending or self.stored.get(each.id) != len(each.tokens):
                self.node(each)
        self.pending.clear()

    def keep(self, event: Event, node: Node | None) -> None:
        """Journal one change, as :data:`KEEPS` says for its event."""
        answer(self, event, node, NODE_KEEPS, KEEPS)

    def keep_tokens(self, node: Node) -> None:
        self.pending[node.id] = node
        self._buffer()

    def keep_merge(self, node: Node) -> None:
        nodes = self.loom.tree.nodes
        gone = [i for i in self.stored if i not in nodes]
        gone += [i for i in self.journaled if i not in nodes and i not in gone]
        for i in gone:
            self.stored.pop(i, None)
            self.journaled.pop(i, None)
            self.kept.pop(i, None)
        self.write("removed", gone)
        self.node(node)

    def keep_split(self, node: Node) -> None:
        self.node(node)
        self.node(node.children[0])

    def keep_move(self, node: Node) -> None:
        if node.parent is not None:
            for sibling in node.parent.children:  # their places changed
                self.node(sibling)

    def keep_node(self, node: Node) -> None:
        self.pending.pop(node.id, None)
        self.node(node)

    def keep_cursor(self, node: Node) -> None:
        self.write("set", {"cursor": node.id})

    def keep_settings(self) -> None:
        self.write("set", {"settings": self.loom.settings.as_dict()})

    def keep_models(self) -> None:
        loom = self.loom
        self.write("set", {"models": loom.model_table, "model_state": loom.model_state})

    def keep_contexts(self) -> None:
        self.write("set", {"contexts": self.loom.contexts.versions.as_dict()})

    def keep_pending(self) -> None:
        """Journal the tokens generated since the last line."""
        for node in take(self.pending):
            end = settled(node)
            start = self.journaled.get(node.id, 0)
            if end > start:
                self._tokens(node, start, end)
            elif end < start:
                self.node(node)

    def node(self, node: Node) -> None:
        """Journal the state of ``node``: the tokens from its first change on where the
        journal holds the rest as it is, else the whole of it."""
        end = settled(node)
        kept = self.kept.get(node.id)
        head = node_head(node)
        if kept is not None and kept.head == head:
            start = kept.same_until(node, end)
            if start == end == len(kept.tokens):
                return  # the journal holds it as it is
            self._tokens(node, start, end)
            return
        state = node_state(node, self.pieces.node_pieces(node, 0, end))
        del state["tokens"][end:], state["logprobs"][end:], state["top"][end:]
        written = self.write("node", state)
        self._vocab([node])
        self.journaled[node.id] = end
        if written:
            self.kept[node.id] = Kept.of(node, end, head)

    def _tokens(self, node: Node, start: int, end: int) -> None:
        """Journal tokens ``start:end`` of ``node`` in place of those it held from
        ``start`` on."""
        pieces = self.pieces.node_pieces(node, start, end)
        written = self.write("tokens", token_state(node, start, end, pieces))
        self._vocab([node], {node.id: start})
        self.journaled[node.id] = end
        kept = self.kept.get(node.id)
        if not written:  # the next change to it journals it whole
            self.kept.pop(node.id, None)
        elif kept is not None:
            kept.replace_from(node, start, end)

    def _vocab(self, nodes: list[Node], start: dict[int, int] | None = None) -> None:
        new = alternative_ids(nodes, start) - self.vocab
        if new:
            self.write("vocab", {t: self.pieces.piece(t) for t in new})
            self.vocab |= new

    def write(self, kind: str, value: object) -> bool:
        """Append one line to the journal; whether it is there. A journal that fails too
        is told, not raised: the live tree still holds it all, written at the next try."""
        try:
            self.journal.write(kind, value)
        except OSError as exc:
            if not self.error:
                self.error = exc.strerror or str(exc)
                self._tell()
            return False
        if self.error:
            self.error = ""
            self._tell()
        return True

    def discard(self) -> None:
        """The file holds everything again: the journal is deleted."""
        self.journaled.clear()
        self.kept.clear()
        self.journal.discard()


K = Keeper

NODE_KEEPS: dict[Event, Callable[[Keeper, Node], None]] = {
    Event.TOKENS: K.keep_tokens,
    Event.MERGE: K.keep_merge,
    Event.SPLIT: K.keep_split,
    Event.MOVE: K.keep_move,
    Event.ADD: K.keep_node,
    Event.REWRITE: K.keep_node,
    Event.UPDATE: K.keep_node,
    Event.RECORDS: K.keep_node,
    Event.CURSOR: K.keep_cursor,
}
"""How the journal keeps each change to one node while the file cannot take it."""

KEEPS: dict[Event, Callable[[Keeper], None]] = {
    Event.DONE: K.keep_pending,
    Event.SETTINGS: K.keep_settings,
    Event.MODELS: K.keep_models,
    Event.CONTEXTS: K.keep_contexts,
}
"""How the journal keeps each change to the session as a whole."""

del K


def whole_data(
    loom: Loom, pieces: PieceMaker, caret: Caret | None, typed: Typed | None
) -> SessionData:
    """Everything the live session holds, as a file holds it (``caret`` and ``typed``:
    what the file holds beside the Loom)."""
    nodes = list(loom.tree.nodes.values())
    return SessionData(
        tree=loom.tree,
        pieces={node.id: pieces.node_pieces(node) for node in nodes},
        cursor=loom.cursor.id,
        settings=loom.settings.as_dict(),
        contexts=loom.contexts.versions.as_dict(),
        vocab={t: pieces.piece(t) for t in alternative_ids(nodes)},
        models=loom.model_table,
        model_state=loom.model_state,
        caret=caret,
        typed=typed,
    )


def made_again(loom: Loom, store: SessionStore, path: Path, settings: dict) -> SessionStore:
    """A session file that was removed (or its folder), made again empty: its store."""
    from loomterm.sessions.identity import model_record

    record = model_record(loom)
    store.close()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return SessionStore.create(path, model=record, settings=settings)
    except OSError as exc:
        raise SessionError(f"cannot write session {path}: {exc.strerror}") from None
