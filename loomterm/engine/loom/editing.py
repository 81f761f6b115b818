"""Editing the tree: truncate, append, pick, splice, edit and retype.

A part the :class:`~loomterm.engine.loom.facade.Loom` holds and delegates to; it owns
no state and reaches the Loom only through the public :class:`EditHost` (the tree, the
runners, the lock, the tokenizer), the change notices' ``emit`` and the context part's
``hold_moved``, all handed to it when it is made. The pure planning of an edit (which
tokens change) is ``edits``; this part makes the nodes and asks the runners for KV.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

from loomterm.engine.events import Event
from loomterm.engine.kv.window import segments
from loomterm.engine.loom.edits import in_run, plan_edit, plan_retype
from loomterm.engine.loom.events import Emit
from loomterm.errors import EditRangeError, EmptyEditError, InputError, PrefillCancelled
from loomterm.tree import Node, Origin

if TYPE_CHECKING:
    from loomterm.engine.runner import Capabilities, Runner
    from loomterm.engine.text import TokenText
    from loomterm.tree import Tree

Hold = Callable[[list[tuple[Node, int, int]], int], bool]


class EditHost(Protocol):
    """What editing needs of the Loom: all of it public."""

    tree: Tree

    @property
    def runner(self) -> Runner: ...

    @property
    def root(self) -> Node: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def codec(self) -> TokenText: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def models(self) -> dict[str, Runner]: ...

    @property
    def active_model(self) -> str: ...

    def exclusive(self) -> contextlib.AbstractContextManager: ...

    def check_node(self, node: Node) -> None: ...

    def encode(self, text: str, at_start: bool = False) -> list[int]: ...


class LoomEdits:
    """The Loom's editing operations (see the module docstring)."""

    def __init__(self, loom: EditHost, emit: Emit, hold_moved: Hold) -> None:
        self.loom = loom
        self.emit = emit
        # Under memory, world info or a note: the working buffer's columns of a fast
        # splice's suffix are held to be moved (``LoomContext.hold_moved``).
        self.hold_moved = hold_moved

    def _each_runner(self) -> list[Runner]:
        return list(self.loom.models.values())

    def prepare(self, node: Node) -> PrefillCancelled | None:
        """``runner.prepare(node)``; a stopped prefill is returned, not raised."""
        try:
            self.loom.runner.prepare(node)
        except PrefillCancelled as stopped:
            return stopped
        return None

    @staticmethod
    def stopped(error: PrefillCancelled, node: Node) -> PrefillCancelled:
        """``error``, saying the operation left the tree whole at ``node``."""
        error.node = node
        return error

    def check_tokens(self, tokens: list[int]) -> None:
        """Raise ``InputError`` for a token id outside the active model's vocabulary."""
        vocab_size = self.loom.runner.vocab_size
        bad = [t for t in tokens if not 0 <= int(t) < vocab_size]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})")

    def _add(self, parent: Node, tokens: list[int], origin: Origin, **fields: Any) -> Node:
        child = self.loom.tree.add(parent, tokens, origin, **fields)
        self.emit(Event.ADD, child)
        return child

    def truncate(self, node: Node, length: int) -> Node:
        """The node whose path is the first ``length`` tokens of ``node``'s path.
        Splits a node if needed; runs no forward pass."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            total = node.end
            if not 0 <= length <= total:
                raise EditRangeError(f"length {length} is outside the path (0..{total})")
            if length == total:
                return node
            if length == 0:
                return self.loom.root
            holder, offset = self.loom.tree.locate(node, length - 1)
            if offset == len(holder.tokens) - 1:
                return holder
            head = self.loom.tree.split(holder, offset + 1)
            for runner in self._each_runner():
                runner.split(head, holder, offset + 1)
            self.emit(Event.SPLIT, head)
            return head

    def append(self, node: Node, text: str, origin: Origin = Origin.USER, **meta: Any) -> Node:
        """A new child of ``node`` holding ``text``'s tokens, with its KV computed."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            tokens = self.loom.encode(text, at_start=node.end == 0)
            if not tokens:
                raise EmptyEditError("nothing to append: the text is empty")
            return self.append_tokens(node, tokens, origin, **meta)

    def append_tokens(
        self, node: Node, tokens: list[int], origin: Origin = Origin.USER, **meta: Any
    ) -> Node:
        """Like ``append``, for token ids."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            self.check_tokens(tokens)
            child = self._add(node, list(tokens), origin, meta=dict(meta))
            stopped = self.prepare(child)
            if stopped is not None:
                raise self.stopped(stopped, child)
            return child

    def pick(self, node: Node, position: int, token_id: int) -> Node:
        """A branch where path position ``position`` holds ``token_id`` (an alternative
        from the top list) and nothing follows. Costs no forward pass; an existing
        branch with that token is reused."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            if not 0 <= position < node.end:
                raise EditRangeError(f"position {position} is outside the path (0..{node.end - 1})")
            self.check_tokens([token_id])
            holder, offset = self.loom.tree.locate(node, position)
            alternatives = holder.top[offset] or []
            prefix = self.truncate(node, position)
            for child in prefix.children:
                if child.tokens and child.tokens[0] == token_id:
                    return self.truncate(child, position + 1)
            logprob = next((lp for t, lp in alternatives if t == token_id), None)
            return self._add(
                prefix,
                [token_id],
                Origin.MODEL,
                logprobs=[logprob],
                top=[alternatives or None],
                meta={"picked": True, "model": holder.meta.get("model") or self.loom.active_model},
            )

    def splice(self, node: Node, start: int, end: int, text: str, exact: bool = False) -> Node:
        """Replace path tokens ``[start, end)`` with ``text``'s tokens, on a new branch."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            return self.splice_tokens(node, start, end, self.loom.encode(text), exact)

    def splice_tokens(
        self, node: Node, start: int, end: int, tokens: list[int], exact: bool = False
    ) -> Node:
        """``splice`` with token ids. Returns the new branch's last node.

        Fast (``exact=False``) only where the runner can move cached keys, the suffix's
        KV is all stored and the result fits the context window; otherwise exact."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            total = node.end
            if not 0 <= start <= end <= total:
                raise EditRangeError(f"range {start}..{end} is outside the path (0..{total})")
            self.check_tokens(tokens)
            if start == end and not tokens:
                raise EmptyEditError("empty edit: nothing removed and nothing inserted")
            if node.path_tokens()[start:end] == list(tokens):
                return node
            prefix = self.truncate(node, start)
            # After the truncate: it may have split a node that the suffix starts in.
            suffix = segments(node, end, total)
            tail = self._add(prefix, list(tokens), Origin.EDIT) if tokens else prefix
            fast = (
                not exact
                and self.loom.capabilities.rerope
                and start + len(tokens) + (total - end) <= self.loom.n_ctx
            )
            movable = fast and self.loom.runner.can_move(suffix)
            # Under memory, world info or a note: the buffer's suffix columns are moved.
            held = fast and self.hold_moved(suffix, start + len(tokens))
            fast = movable or held
            delta = len(tokens) - (end - start)
            stopped = None  # a stopped prefill: the branch is still made whole
            if tokens and fast and not held:
                stopped = self.prepare(tail)  # the inserted tokens are computed, exactly
            for source, lo, hi in suffix:
                # Exact: the suffix is computed again in its new context, and its records
                # with it. Fast: its KV (and so its records) is the old context's, moved.
                copy = self.loom.tree.add(
                    tail,
                    source.tokens[lo:hi],
                    source.origin,
                    logprobs=source.logprobs[lo:hi] if fast else None,
                    top=source.top[lo:hi] if fast else None,
                    sampling=source.sampling,
                    seed=source.seed,
                    meta={k: v for k, v in source.meta.items() if k in ("role", "model")},
                )
                if fast:
                    if movable:
                        copy.kv = self.loom.runner.moved_kv(source, lo, hi, delta)
                    copy.approx = True
                self.emit(Event.ADD, copy)
                tail = copy
            if tail.end and stopped is None:
                stopped = self.prepare(tail)
            if stopped is not None:
                raise self.stopped(stopped, tail)
            return tail

    def edit(self, node: Node, new_text: str, exact: bool = False) -> Node:
        """The path's whole text changed to ``new_text``: re-tokenize the changed region
        and splice only the tokens between the longest common token prefix and suffix."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            if not isinstance(new_text, str):
                raise InputError("text must be a string")
            start, end, inserted = plan_edit(
                self.loom.codec,
                lambda text: self.loom.encode(text),
                node.path_tokens(),
                new_text,
                stops=self.loom.eos_ids,
            )
            return self.splice_tokens(node, start, end, inserted, exact)

    def retype(
        self, node: Node, new_text: str, exact: bool = False, run: Collection[int] = ()
    ) -> Node | None:
        """The path's text changed to ``new_text`` inside the text of one node the writer
        is writing: that node's tokens change in place, and no branch is made. Returns
        ``node``, or None when the change is not of that kind (then ``edit`` branches).

        The node is ``node`` itself when the writer wrote it (origin user or edit) and it
        has no children, or a node of ``run`` (the ids of nodes the current typing run
        made) whose nodes below on the path are all the run's: they keep their tokens
        and move with the change (their KV re-rotated, or recomputed when ``exact``).
        Only the changed node's tokens from the change on are computed (next-token
        logits included), as an append of them would; an ``rewrite`` event tells the
        session file."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            if not isinstance(new_text, str):
                raise InputError("text must be a string")
            path = node.path()[1:]
            plan = plan_retype(
                self.loom.codec,
                lambda text, first: self.loom.encode(text, at_start=first),
                path,
                new_text,
                in_run(path, run),
            )
            if plan is None:
                return None
            self.check_tokens(plan.tokens)
            target, below = path[plan.index], path[plan.index + 1 :]
            delta = len(plan.tokens) - len(target.tokens)
            # The nodes below read other text now: moved (re-roped by ``delta``, flagged
            # approximate, as a fast splice's suffix is) or computed again.
            moved = (
                not exact
                and self.loom.capabilities.rerope
                and node.end + delta <= self.loom.n_ctx
                and self.loom.runner.can_move([(item, 0, len(item.tokens)) for item in below])
            )
            for item in below:  # before the target's columns go: their KV may alias them
                self._shift(item, delta, moved)
            for runner in self._each_runner():
                runner.rewrite(target, plan.keep)
            keep = plan.keep
            target.tokens = list(plan.tokens)
            target.logprobs = target.logprobs[:keep] + [None] * (len(plan.tokens) - keep)
            target.top = target.top[:keep] + [None] * (len(plan.tokens) - keep)
            self.emit(Event.REWRITE, target)
            for item in below:  # moved: a flag changed; recomputed: records cleared
                self.emit(Event.UPDATE if moved else Event.REWRITE, item)
            stopped = self.prepare(node)
            if stopped is not None:
                raise self.stopped(stopped, node)
            return node

    def _shift(self, item: Node, delta: int, moved: bool) -> None:
        """``item`` follows a retyped node: its KV re-roped by ``delta`` and flagged
        approximate (``moved``), else dropped with its records, to be computed again."""
        if moved:
            if delta:
                item.kv = self.loom.runner.moved_kv(item, 0, len(item.tokens), delta)
            item.approx = True
        else:
            item.kv = None
            item.logprobs = [None] * len(item.tokens)
            item.top = [None] * len(item.tokens)
