"""The journal: changes a session file could not take yet, kept in a file of their own.

When a write to a session fails (a full disk, a folder made read-only or removed), the
recorder keeps every later change in memory (the live tree) and appends it here, one
JSON line per change, each flushed and fsynced before the call returns. Once the session
file can be written again, everything is written to it and the journal is deleted. A
journal left behind (the program was killed while the disk was full) is replayed into
the session the next time it is opened for writing (:func:`replay`), so nothing typed or
generated in a disk-full period is lost.

Where: ``journal_dirs()`` (``loomterm.config.locations``), first the folder beside the data
folder, then one in the temporary folder (another file system, most often), tried in
that order for each line. A session's journal files are named by a digest of the
session file's absolute path; every line carries a sequence number, so the lines of a
journal that moved to the next folder mid-way are put back in order.

Lines (``kind`` first):

- ``node``: a node's whole state (place among its siblings, tokens, pieces, records);
- ``tokens``: tokens ``start..`` of a node (generation streams them);
- ``removed``: ids of nodes that left the tree (a merge);
- ``set``: session keys (cursor, settings, models, model_state, contexts, caret, typed);
- ``vocab``: display text of token ids seen among alternatives.

Standard library only. A torn last line (a crash mid-write) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from loomterm.config.locations import journal_dirs
from loomterm.store.data import SessionData
from loomterm.tree import Node, Origin

SUFFIX = ".journal"
FORMAT = "loomterm-journal"


def journal_name(session_path: Path) -> str:
    """The file name of a session's journal (in any of the journal folders)."""
    where = str(Path(session_path).expanduser().absolute())
    digest = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{Path(session_path).name}-{digest}{SUFFIX}"


def journal_files(session_path: Path) -> list[Path]:
    """The journal files a session has left, in any journal folder."""
    name = journal_name(session_path)
    return [folder / name for folder in journal_dirs() if (folder / name).is_file()]


def node_head(node: Node) -> dict[str, Any]:
    """What a ``node`` line holds of a node besides its tokens and their records."""
    parent = node.parent
    return {
        "id": node.id,
        "parent": parent.id if parent is not None else None,
        "position": parent.children.index(node) if parent is not None else 0,
        "origin": Origin(node.origin).value,
        "approx": bool(node.approx),
        "sampling": node.sampling,
        "seed": node.seed,
        "created": float(node.created),
        "meta": node.meta or {},
    }


def node_state(node: Node, pieces: list[str]) -> dict[str, Any]:
    """A node's whole state as a journal line holds it."""
    return {
        **node_head(node),
        "tokens": [int(t) for t in node.tokens],
        "logprobs": [None if p is None else float(p) for p in node.logprobs],
        "top": [_top(t) for t in node.top],
        "pieces": list(pieces),
    }


def token_state(node: Node, start: int, end: int, pieces: list[str]) -> dict[str, Any]:
    """Tokens ``start:end`` of ``node`` as a journal line holds them."""
    return {
        "id": node.id,
        "start": start,
        "tokens": [int(t) for t in node.tokens[start:end]],
        "logprobs": [None if p is None else float(p) for p in node.logprobs[start:end]],
        "top": [_top(t) for t in node.top[start:end]],
        "pieces": list(pieces),
    }


def _top(top: Any) -> list[list[float]] | None:
    return None if top is None else [[int(t), float(p)] for t, p in top]


class Journal:
    """The journal of one session file: lines appended, each on disk when
    :meth:`write` returns.

    Attributes:
        session_path: The session file it keeps changes for.
        where: The file the last line went to (None before the first).
        lines: How many lines this journal holds.
    """

    def __init__(self, session_path: Path) -> None:
        self.session_path = Path(session_path)
        self.where: Path | None = None
        self.lines = 0
        self._seq = 0

    def write(self, kind: str, value: Any) -> Path:
        """Append one line and fsync it; the first folder that takes it keeps it.
        Raises ``OSError`` (the last folder's) when none does."""
        self._seq += 1
        line = json.dumps({"kind": kind, "n": self._seq, "t": time.time(), "value": value})
        error: OSError | None = None
        folders = journal_dirs()
        if self.where is not None and self.where.parent in folders:
            folders.remove(self.where.parent)
            folders.insert(0, self.where.parent)  # keep to one file while it takes lines
        for folder in folders:
            path = folder / journal_name(self.session_path)
            try:
                folder.mkdir(parents=True, exist_ok=True)
                _append(path, line, self.session_path)
            except OSError as exc:
                error = exc
                continue
            self.where = path
            self.lines += 1
            return path
        assert error is not None
        raise error

    def discard(self) -> None:
        """Delete the session's journal files: the session file holds it all now."""
        for path in journal_files(self.session_path):
            path.unlink(missing_ok=True)
        self.where = None
        self.lines = 0


def _append(path: Path, line: str, session_path: Path) -> None:
    new = not path.exists()
    with open(path, "a", encoding="utf-8") as handle:
        if new:
            header = {"format": FORMAT, "session": str(session_path.absolute())}
            handle.write(json.dumps(header) + "\n")
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    if new:
        _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_lines(session_path: Path) -> list[dict[str, Any]]:
    """Every line a session's journals hold, in the order they were written. Lines
    that do not parse (a torn last line) and files of another session are skipped."""
    lines: list[dict[str, Any]] = []
    want = str(Path(session_path).absolute())
    for path in journal_files(session_path):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        rows = text.splitlines()
        try:
            header = json.loads(rows[0]) if rows else {}
        except ValueError:
            continue
        if not isinstance(header, dict) or header.get("session") != want:
            continue
        for row in rows[1:]:
            try:
                item = json.loads(row)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("n"), int):
                lines.append(item)
    # Numbers restart with each run: a run's lines follow the one before (by time).
    return sorted(lines, key=lambda item: (float(item.get("t") or 0), item["n"]))


def apply(data: SessionData, lines: list[dict[str, Any]]) -> None:
    """Apply journal ``lines`` to ``data`` in memory (its tree, pieces and keys).
    A line that does not fit (a node whose parent is unknown) is skipped."""
    tree = data.tree
    for item in lines:
        kind, value = item.get("kind"), item.get("value")
        try:
            if kind == "node":
                _apply_node(data, value)
            elif kind == "tokens":
                _apply_tokens(data, value)
            elif kind == "removed":
                for node_id in value:
                    node = tree.nodes.get(int(node_id))
                    if node is None or node is tree.root or node.children:
                        continue  # a merge removes leaves of the path only: keep the rest
                    del tree.nodes[node.id]
                    data.pieces.pop(node.id, None)
                    if node.parent is not None and node in node.parent.children:
                        node.parent.children.remove(node)
            elif kind == "set":
                _apply_keys(data, value)
            elif kind == "vocab":
                pieces = {int(k): v for k, v in value.items() if isinstance(v, str)}
                if all(0 <= t < TOKEN_LIMIT for t in pieces):
                    data.vocab.update(pieces)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            continue
    tree.continue_ids()


def _apply_node(data: SessionData, state: dict[str, Any]) -> None:
    tree = data.tree
    node_id, parent_id = state["id"], state.get("parent")
    if not _whole(node_id) or not (parent_id is None or _whole(parent_id)):
        return
    parent = tree.nodes[parent_id] if parent_id is not None else None
    node = tree.nodes.get(node_id)
    if node is None and parent is None:
        return  # a second root: not ours
    if node is not None and (parent is None) != (node is tree.root):
        return  # the root stays the root
    if node is not None and parent is not None and node.is_ancestor_of(parent):
        return  # under itself: no cycles
    tokens, logprobs, top, pieces = _records(state)
    origin = Origin(state.get("origin", Origin.USER.value))
    sampling, meta, seed = state.get("sampling"), state.get("meta") or {}, state.get("seed")
    if not (sampling is None or isinstance(sampling, dict)) or not isinstance(meta, dict):
        return
    if not (seed is None or _whole(seed)):
        return
    created = float(state.get("created") or time.time())
    if node is None:
        node = Node(id=node_id)
        tree.nodes[node_id] = node
    if node.parent is not None and node in node.parent.children:
        node.parent.children.remove(node)
    if parent is not None:
        node.parent = parent
        position = max(0, min(int(state.get("position", 0)), len(parent.children)))
        parent.children.insert(position, node)
    node.origin = origin
    node.approx = bool(state.get("approx"))
    node.sampling = sampling
    node.seed = seed
    node.created = created
    node.meta = dict(meta)
    node.tokens, node.logprobs, node.top = tokens, logprobs, top
    data.pieces[node_id] = pieces


TOKEN_LIMIT = 2**31  # token ids are small: anything else is not a line of ours


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _records(state: dict[str, Any]) -> tuple[list, list, list, list]:
    """A line's tokens, log-probabilities, alternatives and pieces, checked; raises
    ``ValueError`` for anything a session file could not hold."""
    tokens = [int(t) for t in state["tokens"]]
    logprobs = [None if p is None else float(p) for p in state["logprobs"]]
    top = [None if t is None else [(int(a), float(b)) for a, b in t] for t in state["top"]]
    pieces = [p for p in state["pieces"] if isinstance(p, str)]
    if not len(tokens) == len(logprobs) == len(top) == len(pieces):
        raise ValueError("records of different lengths")
    ids = tokens + [a for alternatives in top if alternatives for a, _ in alternatives]
    if any(not 0 <= t < TOKEN_LIMIT for t in ids):
        raise ValueError("a token id out of range")
    return tokens, logprobs, top, pieces


def _apply_tokens(data: SessionData, state: dict[str, Any]) -> None:
    node = data.tree.nodes[int(state["id"])]
    start = int(state["start"])
    tokens, logprobs, top, pieces = _records(state)
    had = data.pieces.setdefault(node.id, [])
    if start < 0:
        return
    if start > len(node.tokens):
        return  # a gap: the lines before it are missing
    del node.tokens[start:], node.logprobs[start:], node.top[start:], had[start:]
    node.tokens += tokens
    node.logprobs += logprobs
    node.top += top
    had += pieces


def _apply_keys(data: SessionData, keys: dict[str, Any]) -> None:
    from loomterm.store.data import Caret, Typed

    for key, value in keys.items():
        if key == "cursor" and _whole(value):
            data.cursor = value
        elif key in ("settings", "contexts", "models", "model_state") and isinstance(value, dict):
            setattr(data, key, value)
        elif key == "caret":
            data.caret = Caret.from_json(value)
        elif key == "typed":
            data.typed = Typed.from_json(value)
