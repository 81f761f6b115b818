"""The Loom: a tree of token segments with cached KV, and the operations on it.

Every operation returns nodes; none destroys one. Keys and values live on the nodes
(``kvcache`` explains the layout); the model runs on one working cache that follows the
path being worked on and keeps whatever prefix it already holds.

- ``truncate`` moves the end back. It splits a node when the cut falls inside it, the
  halves sharing one KV storage, and computes at most the last kept token again (for
  its logits).
- ``splice`` replaces a token range. Fast mode copies the suffix with its keys
  re-rotated to the new positions (``rope``), marks it approximate and computes only
  the inserted tokens; exact mode recomputes the suffix.
- ``generate`` samples ``n`` continuations as one batch over one shared prefix.
- When a path outgrows ``n_ctx`` the model sees a window: the first ``n_keep``
  tokens and the most recent rest, shifted in blocks of ``n_discard`` as llama.cpp's
  context shift does. During generation RoPE models re-rotate the kept keys in place
  (approximate, flagged); other models recompute the window.

Thread safety: every public method takes one re-entrant lock, so a UI may call from a
worker thread while reading nodes from another.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from loomterm.engine import attention
from loomterm.engine.budget import LruClock, default_budget, parse_size
from loomterm.engine.kvcache import Segment, WorkingCache, kv_bytes, kv_len, split_kv
from loomterm.engine.rope import RopeSpec, probe_rope, rerotate, rerotate_kv
from loomterm.engine.sampling import (
    SamplingParams,
    make_generators,
    sample,
    token_records,
)
from loomterm.engine.speculative import drafted_decode, drafting_config
from loomterm.engine.text import StreamDecoder, TokenText, common_prefix, common_suffix
from loomterm.errors import ContextError, EditRangeError, EmptyEditError, InputError, LoomError
from loomterm.tree import Node, Origin, Tree

if TYPE_CHECKING:
    from loomterm.engine.models import LoadedModel

Listener = Callable[[str, "Node | None"], None]
Progress = Callable[[str, int, "int | None"], None]
OnToken = Callable[[Node, int, str], None]

MIN_CTX = 16
PREFILL_CHUNK = 512
DEFAULT_SETTINGS = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "max_new_tokens": 128,
    "n": 4,
    "splice_mode": "fast",
    "kv_snapshot": False,
    # Drafted decoding for one continuation (loomterm.engine.speculative): "auto",
    # "tree", "lookahead" or "off".
    "drafting": "auto",
}


class Loom:
    """A session's tree and the model that extends it. See the module docstring."""

    # -- construction ------------------------------------------------------------
    def __init__(
        self,
        loaded: LoadedModel,
        n_ctx: int | None = None,
        tree: Tree | None = None,
        kv_budget: int | str | None = None,
    ):
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.dtype = loaded.dtype
        self.text_codec = TokenText(self.tokenizer)
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self.progress: Progress | None = None
        self.settings: dict[str, Any] = dict(DEFAULT_SETTINGS)
        self.session = None  # the on-disk recorder, once saved or opened (loomterm.session)

        config = self.model.config.get_text_config(decoder=True)
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.max_positions = int(
            getattr(config, "max_position_embeddings", None)
            or getattr(config, "n_positions", None)
            or 4096
        )
        self._cache_kw = (
            "cache"
            if "cache" in inspect.signature(self.model.forward).parameters
            else "past_key_values"
        )
        # Attention that reads the working cache's strided views in place (see attention).
        self.fast_attention = attention.install(self.model)
        n_layers, n_heads, head_dim = self._kv_geometry()
        self.rope: RopeSpec | None = probe_rope(self.model, self._fresh_kv, self.vocab_size)
        self.n_ctx = self._check_ctx(n_ctx)
        self.n_keep = min(64, self.n_ctx // 4)
        self.n_discard = max(1, (self.n_ctx - self.n_keep) // 2)
        self.work = WorkingCache(n_layers, n_heads, head_dim, self.dtype, self.device, self.n_ctx)
        self._logits: torch.Tensor | None = None  # (B, V) after the working cache's columns
        self._logits_len = -1

        self.tree = tree or Tree()
        self.tree.split_kv = split_kv
        # Resident KV cap (bytes); least recently used branches lose their KV first.
        self.kv_budget = parse_size(kv_budget) or default_budget(self.device)
        self.lru = LruClock()
        self.evictions = 0
        self._cursor = self.tree.root
        self.eos_ids = self._eos_ids()

    @classmethod
    def load(
        cls,
        model: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        n_ctx: int | None = None,
        progress: Progress | None = None,
        kv_budget: int | str | None = None,
    ) -> Loom:
        """Load a model (None: the default model) and start an empty loom on it.
        ``kv_budget`` caps resident KV ("2G", bytes; default: half the free memory)."""
        from loomterm.engine.models import load_model

        loaded = load_model(model, device=device, dtype=dtype, progress=progress)
        return cls.from_loaded(loaded, n_ctx, kv_budget=kv_budget)

    @classmethod
    def from_loaded(
        cls,
        loaded: LoadedModel,
        n_ctx: int | None = None,
        tree: Tree | None = None,
        kv_budget: int | str | None = None,
    ) -> Loom:
        """A loom on an already loaded model, optionally over an existing tree."""
        return cls(loaded, n_ctx=n_ctx, tree=tree, kv_budget=kv_budget)

    @classmethod
    def open(cls, path, model: str | None = None, device: str = "auto", dtype: str = "auto", **kw):
        """Open a saved session (model None: the one it was made with)."""
        from loomterm.session import open_loom

        return open_loom(path, model=model, device=device, dtype=dtype, **kw)

    def save(self, path) -> None:
        """Write the session to ``path``; later changes then go there as they happen."""
        from loomterm.session import save_loom

        save_loom(self, path)

    def close(self) -> None:
        """Flush and close the session file, if any (saving a KV snapshot when on)."""
        if self.session is not None:
            from loomterm.session import close_session

            close_session(self)

    def _check_ctx(self, n_ctx: int | None) -> int:
        if n_ctx is None:
            return self.max_positions
        if n_ctx < MIN_CTX:
            raise ContextError(f"n_ctx {n_ctx} is too small: use at least {MIN_CTX} tokens")
        if self.rope is None and n_ctx > self.max_positions:
            raise ContextError(
                f"n_ctx {n_ctx} is larger than this model's {self.max_positions} positions"
            )
        return n_ctx

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (
            getattr(self.model, "generation_config", None),
            self.model.config,
            self.tokenizer,
        ):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    # -- model plumbing ------------------------------------------------------------
    def _kv_geometry(self) -> tuple[int, int, int]:
        """(layers, KV heads, head dim), read off one real forward pass."""
        kv = self._fresh_kv([0], 0)
        return kv.shape[0], kv.shape[2], kv.shape[4]

    @torch.inference_mode()
    def _fresh_kv(self, tokens: list[int], offset: int) -> torch.Tensor:
        """KV of ``tokens`` at positions ``offset..`` with nothing before: (L, 2, H, T, D)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        ids = torch.tensor([tokens], device=self.device)
        positions = torch.arange(offset, offset + len(tokens), device=self.device)[None]
        self.model(input_ids=ids, position_ids=positions, use_cache=True, **{self._cache_kw: cache})
        layers = [(layer.keys[0], layer.values[0]) for layer in cache.layers]
        return torch.stack([torch.stack(kv) for kv in layers])  # (L, 2, H, T, D)

    @torch.inference_mode()
    def _forward(
        self,
        ids: torch.Tensor,
        keep: int = 1,
        positions: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``ids`` (B, q) after the working cache's columns, writing their KV in
        place at columns ``length..length+q``. Returns logits of the last ``keep``
        positions: (B, keep, V). The caller commits the columns it keeps.

        ``positions`` (B, q) overrides the default ``length + arange(q)``, and
        ``attention_mask`` (B, 1, q, length+q), boolean, True = may attend, replaces
        the causal mask: drafted decoding verifies a tree of guesses this way.
        """
        batch, q = ids.shape
        self.work.prepare(q, batch)
        if positions is None:
            positions = torch.arange(self.work.length, self.work.length + q, device=self.device)
            positions = positions[None].expand(batch, q)
        extra = {}
        if attention_mask is not None:
            extra["attention_mask"] = attention_mask
        kwargs = dict(input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=keep)
        kwargs[self._cache_kw] = self.work
        try:
            return self.model(**kwargs, **extra).logits  # (B, keep, V)
        except torch.OutOfMemoryError:
            # Free every branch's KV but the ones being worked on, then try once more.
            self._free_for_oom()
            try:
                return self.model(**kwargs, **extra).logits
            except torch.OutOfMemoryError:
                raise LoomError(
                    f"out of memory on {self.device.type} even after freeing cached branches: "
                    "generate fewer siblings, or lower --n-ctx or --kv-budget"
                ) from None

    def _free_for_oom(self) -> None:
        active = {seg.node.id for seg in self.work.segments}
        for node in list(self.tree.nodes.values()):
            if node.kv is not None and node.id not in active:
                self.evict(node)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @contextlib.contextmanager
    def _guard(self):
        """One operation at a time, and no autograd: KV buffers are created and updated
        in place under inference mode, so every operation must run inside it."""
        with self._lock, torch.inference_mode():
            # Softmax tails underflow into subnormal floats, which x86 CPUs multiply up
            # to 100x slower; flush them to zero during engine work only (the mode is
            # per thread and would otherwise leak into the caller's code).
            flush = self.device.type == "cpu" and torch.set_flush_denormal(True)
            try:
                yield
            finally:
                if flush:
                    torch.set_flush_denormal(False)

    # -- events ----------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(event, node)`` on every change: add, tokens, split, update,
        done, cursor, settings."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _emit(self, event: str, node: Node | None) -> None:
        for listener in list(self._listeners):
            listener(event, node)

    # -- reading ---------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return self.tree.root

    @property
    def cursor(self) -> Node:
        """The node the user is at; saved with the session."""
        return self._cursor

    @cursor.setter
    def cursor(self, node: Node) -> None:
        if self.tree.nodes.get(node.id) is not node:
            raise InputError("that node does not belong to this loom")
        self._cursor = node
        self._emit("cursor", node)

    def set_meta(self, node: Node, **changes: Any) -> None:
        """Change ``node.meta`` (bookmark, hidden, role...) and tell the listeners, so
        the session file saves it. A value of None removes the key."""
        with self._guard():
            self._check_node(node)
            for key, value in changes.items():
                if value is None:
                    node.meta.pop(key, None)
                else:
                    node.meta[key] = value
            self._emit("update", node)

    def update_settings(self, **changes: Any) -> None:
        """Change per-session settings (sampling defaults, splice mode...)."""
        unknown = set(changes) - set(DEFAULT_SETTINGS)
        if unknown:
            raise InputError(f"unknown setting: {', '.join(sorted(unknown))}")
        self.settings.update(changes)
        self._emit("settings", None)

    def tokens(self, node: Node) -> list[int]:
        """Token ids of the path from the root to ``node``."""
        return node.path_tokens()

    def text(self, node: Node) -> str:
        """Text of the path from the root to ``node``."""
        return self.text_codec.decode(node.path_tokens())

    def encode(self, text: str, at_start: bool = False) -> list[int]:
        """Token ids for ``text``; special tokens written out (``<|im_start|>``) become
        those tokens. ``at_start`` lets the tokenizer add its start-of-text token."""
        if not isinstance(text, str):
            raise InputError("text must be a string")
        return list(self.tokenizer(text, add_special_tokens=at_start)["input_ids"])

    def decode(self, tokens: list[int]) -> str:
        return self.text_codec.decode(tokens)

    def token_pieces(self, tokens: list[int]) -> list[str]:
        """Display text per token; joined, they equal ``decode(tokens)``."""
        return self.text_codec.pieces(tokens)

    def is_exact(self, node: Node) -> bool:
        """True when no KV on the path was re-rotated (or built on re-rotated KV)."""
        return not any(n.approx for n in node.path())

    def kv_bytes(self) -> int:
        """KV bytes resident across the whole tree (the working buffer not included).
        Safe from any thread without waiting for a running operation: it reads a
        snapshot of the node table (``list`` of a dict is atomic in CPython)."""
        return kv_bytes(list(self.tree.nodes.values()))

    def working_bytes(self) -> int:
        """Bytes of the working cache buffer."""
        return self.work.nbytes()

    def next_logits(self, node: Node) -> torch.Tensor:
        """(vocab,) float32 logits for the token after ``node``'s path."""
        with self._guard():
            return self._ensure(node).float().clone()

    # -- structure -------------------------------------------------------------------
    def _check_node(self, node: Node) -> None:
        if self.tree.nodes.get(node.id) is not node:
            raise InputError("that node does not belong to this loom")

    def _split(self, node: Node, offset: int) -> Node:
        head = self.tree.split(node, offset)
        self.work.rename_split(head, node, offset)
        self._emit("split", head)
        return head

    def truncate(self, node: Node, length: int) -> Node:
        """The node whose path is the first ``length`` tokens of ``node``'s path.
        Splits a node if needed; runs no forward pass."""
        with self._guard():
            self._check_node(node)
            total = node.end
            if not 0 <= length <= total:
                raise EditRangeError(f"length {length} is outside the path (0..{total})")
            if length == total:
                return node
            if length == 0:
                return self.root
            holder, offset = self.tree.locate(node, length - 1)
            if offset == len(holder.tokens) - 1:
                return holder
            return self._split(holder, offset + 1)

    def append(self, node: Node, text: str, origin: Origin = Origin.USER, **meta: Any) -> Node:
        """A new child of ``node`` holding ``text``'s tokens, with its KV computed."""
        with self._guard():
            self._check_node(node)
            tokens = self.encode(text, at_start=node.end == 0)
            if not tokens:
                raise EmptyEditError("nothing to append: the text is empty")
            return self.append_tokens(node, tokens, origin, **meta)

    def append_tokens(
        self, node: Node, tokens: list[int], origin: Origin = Origin.USER, **meta: Any
    ) -> Node:
        """Like ``append``, for token ids."""
        with self._guard():
            self._check_node(node)
            self._check_tokens(tokens)
            child = self.tree.add(node, tokens, origin, meta=dict(meta))
            self._emit("add", child)
            self._ensure(child)
            return child

    def _check_tokens(self, tokens: list[int]) -> None:
        bad = [t for t in tokens if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise InputError(
                f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})"
            )

    def pick(self, node: Node, position: int, token_id: int) -> Node:
        """A branch where path position ``position`` holds ``token_id`` (an alternative
        from the top list) and nothing follows. Costs no forward pass; an existing
        branch with that token is reused."""
        with self._guard():
            self._check_node(node)
            if not 0 <= position < node.end:
                raise EditRangeError(f"position {position} is outside the path (0..{node.end - 1})")
            self._check_tokens([token_id])
            holder, offset = self.tree.locate(node, position)
            alternatives = holder.top[offset] or []
            prefix = self.truncate(node, position)
            for child in prefix.children:
                if child.tokens and child.tokens[0] == token_id:
                    return self.truncate(child, position + 1)
            logprob = next((lp for t, lp in alternatives if t == token_id), None)
            child = self.tree.add(
                prefix,
                [token_id],
                Origin.MODEL,
                logprobs=[logprob],
                top=[alternatives or None],
                meta={"picked": True},
            )
            self._emit("add", child)
            return child

    # -- splicing --------------------------------------------------------------------
    def splice(self, node: Node, start: int, end: int, text: str, exact: bool = False) -> Node:
        """Replace path tokens ``[start, end)`` with ``text``'s tokens, on a new branch."""
        with self._guard():
            self._check_node(node)
            return self.splice_tokens(node, start, end, self.encode(text), exact)

    def splice_tokens(
        self,
        node: Node,
        start: int,
        end: int,
        tokens: list[int],
        exact: bool = False,
        rotate: bool = True,
    ) -> Node:
        """``splice`` with token ids. Returns the new branch's last node.

        ``rotate=False`` keeps a fast splice's suffix keys at their old positions; it
        exists only to measure what re-rotation buys (bench, tests)."""
        with self._guard():
            self._check_node(node)
            total = node.end
            if not 0 <= start <= end <= total:
                raise EditRangeError(f"range {start}..{end} is outside the path (0..{total})")
            self._check_tokens(tokens)
            if start == end and not tokens:
                raise EmptyEditError("empty edit: nothing removed and nothing inserted")
            old = node.path_tokens()
            if old[start:end] == list(tokens):
                return node
            prefix = self.truncate(node, start)
            # After the truncate: it may have split a node that the suffix starts in.
            suffix = self._segments(node, end, total)
            tail = prefix
            if tokens:
                tail = self.tree.add(prefix, list(tokens), Origin.EDIT)
                self._emit("add", tail)
            new_total = start + len(tokens) + (total - end)
            fast = (
                not exact
                and self.rope is not None
                and new_total <= self.n_ctx
                and all(kv_len(n.kv) >= hi for n, lo, hi in suffix)
            )
            delta = len(tokens) - (end - start)
            if tokens and fast:
                self._ensure(tail)  # the inserted tokens are computed, exactly
            for source, lo, hi in suffix:
                copy = self.tree.add(
                    tail,
                    source.tokens[lo:hi],
                    source.origin,
                    logprobs=source.logprobs[lo:hi],
                    top=source.top[lo:hi],
                    sampling=source.sampling,
                    seed=source.seed,
                    meta={k: v for k, v in source.meta.items() if k == "role"},
                )
                if fast:
                    moved = source.kv[:, :, :, lo:hi]  # (L, 2, H, T, D)
                    copy.kv = rerotate_kv(moved, delta, self.rope) if rotate else moved.clone()
                    copy.approx = True
                self._emit("add", copy)
                tail = copy
            if tail.end:
                self._ensure(tail)
            return tail

    def _segments(self, node: Node, start: int, end: int) -> list[tuple[Node, int, int]]:
        """The (node, lo, hi) pieces of ``node``'s path covering positions [start, end)."""
        out = []
        pos = 0
        for item in node.path():
            lo, hi = max(start, pos) - pos, min(end, pos + len(item.tokens)) - pos
            if lo < hi:
                out.append((item, lo, hi))
            pos += len(item.tokens)
        return out

    def edit(self, node: Node, new_text: str, exact: bool = False) -> Node:
        """The path's whole text changed to ``new_text``: re-tokenize the changed region
        and splice only the tokens between the longest common token prefix and suffix."""
        with self._guard():
            self._check_node(node)
            if not isinstance(new_text, str):
                raise InputError("text must be a string")
            old_tokens = node.path_tokens()
            pieces = self.text_codec.pieces(old_tokens)
            old_text = "".join(pieces)
            if new_text == old_text:
                raise EmptyEditError("empty edit: the text is unchanged")
            offsets = [0]
            for piece in pieces:
                offsets.append(offsets[-1] + len(piece))
            whole = self.text_codec.complete_after(old_tokens)
            whole[-1] = True  # the end is always a place to cut, even after stray bytes
            cp = common_prefix(old_text, new_text)
            cs = common_suffix(old_text, new_text, min(len(old_text), len(new_text)) - cp)
            # Cut one whole token outside the change on each side: a token next to an
            # edit may merge with it ("cat" + "s" -> "cats").
            a = max(i for i in range(len(offsets)) if offsets[i] <= cp and whole[i])
            a = max((i for i in range(a) if whole[i]), default=0)
            cut = len(old_text) - cs
            b = min(i for i in range(len(offsets)) if offsets[i] >= cut and whole[i])
            b = min((i for i in range(b + 1, len(offsets)) if whole[i]), default=b)
            middle = new_text[offsets[a] : len(new_text) - (len(old_text) - offsets[b])]
            new_mid = self.encode(middle, at_start=False) if middle else []
            old_mid = old_tokens[a:b]
            k = common_prefix(old_mid, new_mid)
            ks = common_suffix(old_mid, new_mid, min(len(old_mid), len(new_mid)) - k)
            start, end = a + k, b - ks
            inserted = new_mid[k : len(new_mid) - ks]
            if start == end and not inserted:
                raise EmptyEditError("empty edit: the tokens are unchanged")
            return self.splice_tokens(node, start, end, inserted, exact)

    def refresh(self, node: Node) -> Node:
        """Recompute, exactly, the KV of every approximate node on the path (and of
        everything after the first one). Returns ``node``."""
        with self._guard():
            self._check_node(node)
            path = node.path()
            first = next((i for i, n in enumerate(path) if n.approx), None)
            if first is None and node.end <= self.n_ctx:
                return node
            if first is not None:
                self.work.forget(path[first])
                for item in path[first:]:
                    item.kv = None
                    item.approx = False
                    self._emit("update", item)
            if node.end > self.n_ctx:
                self.work.truncate(min(self.work.length, self.n_keep))
            self._logits_len = -1
            self._ensure(node)
            return node

    # -- the working cache -------------------------------------------------------------
    def _shift_for(self, total: int) -> int:
        """How many tokens after ``n_keep`` the window skips for a path of ``total``."""
        if total <= self.n_ctx:
            return 0
        return math.ceil((total - self.n_ctx) / self.n_discard) * self.n_discard

    def _layout(self, node: Node) -> list[Segment]:
        """Which (node, lo, hi) pieces fill the model's window for ``node``'s path."""
        total = node.end
        shift = self._shift_for(total)
        pieces = self._segments(node, 0, min(self.n_keep, total)) if shift else []
        pieces += self._segments(node, self.n_keep + shift if shift else 0, total)
        return [Segment(n, lo, hi) for n, lo, hi in pieces]

    def _ensure(self, node: Node) -> torch.Tensor:
        """Make the working cache hold ``node``'s path (its window) in row 0 alone, and
        return the (V,) logits after it. Reuses the common prefix, loads stored KV and
        computes only what is missing, storing it on the nodes."""
        work = self.work
        if work.batch != 1:
            work.select_row(0, work.segments)
        target = self._layout(node)
        columns = sum(seg.size for seg in target)
        if columns == 0:
            raise EmptyEditError("the document is empty: write something to continue from")
        keep = work.common_prefix_segments(target)
        if keep == columns and self._logits_len == columns and self._logits is not None:
            return self._logits[0]
        keep = min(keep, columns - 1)
        work.truncate(keep)
        windowed = self._shift_for(node.end) > 0
        plan: list[tuple[Node, int, int]] = []  # runs to compute, in order
        col = 0
        approx_before = False
        for seg in target:
            lo, hi = seg.lo, seg.hi
            if col + seg.size <= keep:
                col += seg.size
                approx_before = approx_before or seg.node.approx
                continue
            lo += max(0, keep - col)
            plain = not windowed or col < self.n_keep
            have = min(kv_len(seg.node.kv), hi) if plain else 0
            if col + seg.size == columns:
                have = min(have, hi - 1)  # the final token is computed, for its logits
            if lo < have:
                self._run(plan, approx_before)
                plan = []
                work.load(seg.node, lo, have)
                lo = have
            if lo < hi:
                plan.append((seg.node, lo, hi))
            col += seg.size
        logits = self._run(plan, approx_before, store=True, windowed=windowed)
        self._logits = logits[None]  # (1, V)
        self._logits_len = columns
        path = node.path()
        self.lru.touch(path)
        self._enforce_budget(path)
        return logits

    def _run(
        self,
        plan: list[tuple[Node, int, int]],
        approx_before: bool,
        store: bool = True,
        windowed: bool = False,
    ) -> torch.Tensor | None:
        """Compute the KV of ``plan``'s tokens in chunks, storing it on the nodes where it
        extends their stored prefix. Returns the logits after the last one."""
        if not plan:
            return None
        ids = [t for n, lo, hi in plan for t in n.tokens[lo:hi]]
        owners = [(n, i) for n, lo, hi in plan for i in range(lo, hi)]
        start_col = self.work.length
        logits = None
        total = len(ids)
        for begin in range(0, total, PREFILL_CHUNK):
            chunk = ids[begin : begin + PREFILL_CHUNK]
            out = self._forward(torch.tensor([chunk], device=self.device))
            for node, i in owners[begin : begin + len(chunk)]:
                self.work.commit(1, node, i)
            logits = out[0, -1]
            if self.progress is not None and total > PREFILL_CHUNK:
                self.progress("prefill", min(begin + len(chunk), total), total)
        if store:
            col = start_col
            for node, lo, hi in plan:
                plain = not windowed or col + (hi - lo) <= self.n_keep
                if plain and kv_len(node.kv) == lo:
                    fresh = self.work.columns(col, col + hi - lo)  # (L, 2, H, T, D)
                    node.kv = fresh if node.kv is None else torch.cat([node.kv, fresh], dim=3)
                    # Computed on top of approximate KV, it is approximate too; computed
                    # afresh on an exact path (after an eviction), it is exact.
                    if node.approx != approx_before and (lo == 0 or approx_before):
                        node.approx = approx_before
                        self._emit("update", node)
                approx_before = approx_before or node.approx
                col += hi - lo
        return logits

    # -- generation ------------------------------------------------------------------
    def generate(
        self,
        node: Node,
        max_new_tokens: int,
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        on_token: OnToken | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Node]:
        """Sample ``n`` continuations of ``node`` as one batch; returns the new children.

        ``on_token(child, token_id, piece)`` is called as each token arrives; setting
        ``cancel`` stops within one token, keeping what was generated.
        """
        params = SamplingParams(temperature, top_p, top_k, min_p, repetition_penalty)
        if max_new_tokens < 0 or n < 1:
            raise InputError("max_new_tokens must be >= 0 and n >= 1")
        with self._guard():
            self._check_node(node)
            logits = self._ensure(node)[None].expand(n, -1)  # (n, V)
            kids: list[Node] = []
            try:
                # -- drafted decoding (issue 5): one continuation, verified drafts --
                args = (node, n, kids, logits, max_new_tokens, params, seed, on_token, cancel)
                draft = drafting_config(self, node, n, max_new_tokens)
                if draft is not None:
                    drafted_decode(self, *args, draft)
                else:
                    self._decode(*args)
            finally:
                for kid in kids:
                    self._emit("done", kid)
            return kids

    def _decode(
        self,
        parent: Node,
        n: int,
        kids: list[Node],
        logits: torch.Tensor,
        max_new_tokens: int,
        params: SamplingParams,
        seed: int | None,
        on_token: OnToken | None,
        cancel: threading.Event | None,
    ) -> None:
        """The batched decode loop behind ``generate``.

        Every sampled token is fed back in the same step, so each child ends with its KV
        complete and its next-token logits known. Rows that hit an end-of-sequence
        token stop growing; they keep being fed (their columns are ignored) so the batch
        stays rectangular. The ``n`` children are created (into ``kids``) when their
        first token arrives, so a generation cancelled at once leaves no empty nodes.
        """
        work = self.work
        base = work.length  # columns of the shared prefix
        # KV can be kept on a child only while its columns sit at its path positions.
        plain = self._shift_for(parent.end) == 0
        work.fork(n)
        generators = make_generators(seed, n)
        streams = [StreamDecoder(self.text_codec) for _ in range(n)]
        history = None
        if params.repetition_penalty != 1.0:
            prefix = torch.tensor(parent.path_tokens(), device=self.device, dtype=torch.long)
            history = prefix[None].expand(n, -1).clone()  # (n, T)
        finished = [False] * n
        stored = [0] * n
        fed = torch.zeros(n, dtype=torch.long, device=self.device)  # (n,)
        row0_cols = -1  # columns of row 0 once it stopped
        for _ in range(max_new_tokens):
            if cancel is not None and cancel.is_set():
                break
            chosen = sample(logits, params, generators, history)  # (n,)
            logprobs, alternatives = token_records(logits, chosen)
            picks = chosen.tolist()
            if not kids:
                sampling = params.as_dict()
                for _ in range(n):
                    kids.append(
                        self.tree.add(parent, [], Origin.MODEL, sampling=sampling, seed=seed)
                    )
                    self._emit("add", kids[-1])
            live = [not done for done in finished]
            for row, kid in enumerate(kids):
                if finished[row]:
                    continue
                token = picks[row]
                kid.tokens.append(token)
                kid.logprobs.append(logprobs[row])
                kid.top.append(alternatives[row])
                if on_token is not None:
                    on_token(kid, token, streams[row].push(token))
                self._emit("tokens", kid)
                if token in self.eos_ids:
                    finished[row] = True
            fed = torch.where(torch.tensor(live, device=self.device), chosen, fed)
            if work.length >= self.n_ctx:
                self._shift_window(parent, kids, fed)
                plain = False
                if row0_cols >= 0:
                    row0_cols = -2  # row 0's columns were rebuilt: forget them
                for kid in kids:
                    if self.rope is not None and not kid.approx:
                        kid.approx = True
                        self._emit("update", kid)
            out = self._forward(fed[:, None])  # (n, 1, V)
            work.commit(1, kids[0] if live[0] else None, len(kids[0].tokens) - 1)
            logits = out[:, -1]  # (n, V)
            if live[0] and finished[0]:
                row0_cols = work.length
            if plain:
                for row, kid in enumerate(kids):
                    if live[row]:
                        stored[row] = len(kid.tokens)
            if history is not None:
                history = torch.cat([history, chosen[:, None]], dim=1)
            if all(finished):
                break
        if not kids:  # nothing was generated: the cache still holds the parent
            work.select_row(0, work.segments)
            work.truncate(base)
            return
        self._store_generated(kids, base, stored)
        self.lru.touch([*parent.path(), *kids])
        self._enforce_budget([*parent.path(), kids[0]])
        work.select_row(0, work.segments)
        if row0_cols == -2:
            work.truncate(0)
        elif row0_cols >= 0:
            work.truncate(row0_cols)
        valid = row0_cols == -1 and len(kids[0].tokens) > 0
        self._logits = logits[:1].clone() if valid else None
        self._logits_len = work.length if valid else -1

    # -- memory budget ---------------------------------------------------------------
    def _enforce_budget(self, protect: list[Node]) -> int:
        """Evict least recently used KV until the tree fits ``kv_budget``; nodes in
        ``protect`` (the active path) are never evicted. Returns bytes now resident."""
        storages: dict[int, list] = {}  # storage pointer -> [bytes, node ids]
        for node in self.tree.nodes.values():
            if node.kv is not None:
                storage = node.kv.untyped_storage()
                entry = storages.setdefault(storage.data_ptr(), [storage.nbytes(), set()])
                entry[1].add(node.id)
        resident = sum(size for size, _ in storages.values())
        if resident <= self.kv_budget:
            return resident
        keep = {node.id for node in protect}
        owner = {nid: ptr for ptr, (_, ids) in storages.items() for nid in ids}
        candidates = [n for n in self.tree.nodes.values() if n.kv is not None and n.id not in keep]
        for node in self.lru.oldest_first(candidates):
            entry = storages[owner[node.id]]
            self.evict(node)
            entry[1].discard(node.id)
            if not entry[1]:
                resident -= entry[0]
                if resident <= self.kv_budget:
                    break
        return resident

    def evict(self, node: Node) -> None:
        """Drop ``node``'s KV, keeping its tokens; it is recomputed exactly when used."""
        with self._guard():
            if node.kv is None:
                return
            node.kv = None
            self.evictions += 1
            if node.approx and not any(n.approx for n in node.path()[:-1]):
                node.approx = False  # its recompute will be exact...
                self.work.forget(node)  # ...so the working cache's copy must go too
                self._emit("update", node)

    def _store_generated(self, kids: list[Node], base: int, stored: list[int]) -> None:
        """Copy each child's new KV out of its buffer row onto the child."""
        approx_before = any(n.approx for n in kids[0].parent.path())
        for row, kid in enumerate(kids):
            if stored[row] > 0:
                kid.kv = self.work.columns(base, base + stored[row], row=row)  # (L, 2, H, T, D)
            if approx_before and not kid.approx:
                kid.approx = True
                self._emit("update", kid)

    def _shift_window(self, parent: Node, kids: list[Node], fed: torch.Tensor) -> None:
        """The cache is full: drop ``n_discard`` columns after the first ``n_keep``.

        RoPE models keep the rest, re-rotated back by ``n_discard`` positions (fast,
        approximate, as llama.cpp does). Other models recompute the new window.
        """
        work = self.work
        keep, drop = self.n_keep, self.n_discard
        if self.rope is not None:
            moved = work.buf[:, :, : work.batch, :, keep + drop : work.length]  # (L, 2, B, H, T, D)
            keys = rerotate(moved[:, 0], -drop, self.rope)
            values = moved[:, 1].clone()
            work.forget_columns(keep, drop)
            end = keep + keys.shape[3]
            work.buf[:, 0, : work.batch, :, keep:end] = keys
            work.buf[:, 1, : work.batch, :, keep:end] = values
            return
        # Absolute positions: rebuild the window of every row from its tokens.
        rows = [
            parent.path_tokens() + kid.tokens[:-1] if kid.tokens else parent.path_tokens()
            for kid in kids
        ]
        total = max(len(r) for r in rows)
        shift = self._shift_for(total + 1)
        tails = []
        for row, tokens in enumerate(rows):
            tail = tokens[keep + shift :]
            width = total - keep - shift
            tail = tail + [int(fed[row])] * (width - len(tail))
            tails.append(tail[:width])
        work.truncate(keep)
        segments = [
            Segment(n, lo, hi) for n, lo, hi in self._segments(kids[0], keep + shift, total)
        ]
        out_ids = torch.tensor(tails, device=self.device)  # (B, T)
        for begin in range(0, out_ids.shape[1], PREFILL_CHUNK):
            chunk = out_ids[:, begin : begin + PREFILL_CHUNK]
            self._forward(chunk)
            work.commit(chunk.shape[1])
        work.segments = work.segments[:] + segments
