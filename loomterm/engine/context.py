"""The exact token sequence the model sees for a path: memory, world info, the
document with the author's note inside it.

Pure functions over token ids (the tokenizer comes in as functions):

    start tokens | memory | triggered world info | document window, author's note inside

- **Memory** (its text, a newline added if it has none at the end) follows the path's
  start-of-text tokens, if the tokenizer writes any. It is always kept: it belongs to
  the kept prefix when the window shifts, as llama.cpp's ``n_keep`` and koboldcpp's
  memory are.
- **World info**: an entry joins, after the memory, when one of its keys appears
  (ignoring case) in the text of the path's last ``scan_depth`` tokens; entries keep
  their order, each ends with a newline. Triggered entries count into the kept prefix.
- **Author's note** (a newline added if it has none): inserted at the start of the
  ``depth``-th line from the end of the document window, the last line (partial or
  not) being line 1; depth 0 puts it after the last token, a depth past the first
  line at the window's start. A line starts after a token whose text holds a newline.
  Lines, not tokens, so the insertion point stays put while a line grows and moves
  only when a newline is written. mikupad counts the same way (``authorNoteDepth``,
  "newlines from bottom", default 3); koboldcpp's Lite counts characters from the end
  (``anote_strength`` 320, weak 480 to strong 160, 0 at the end) and places world
  info after the memory by default (``wi_insertlocation`` 0), as here.
- **The window**: when everything does not fit ``n_ctx - reserve`` tokens, the
  document loses tokens from its start (after the start tokens), in blocks of half
  the room left for it, as llama.cpp's context shift drops ``n_discard``, so the
  sequence changes rarely and the kept prefix never.

Injected text is encoded on its own and joined as tokens, so the document's tokens
are the tree's, never re-tokenized.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from loomterm.config.injection import ContextSpec
from loomterm.errors import ContextError

MEMORY, WORLD_INFO, AUTHORS_NOTE, PATH = "memory", "world_info", "authors_note", "path"


@dataclass(frozen=True)
class EncodedSpec:
    """A :class:`~loomterm.config.injection.ContextSpec` with its text as tokens.

    Attributes:
        spec: The version it encodes.
        memory: Memory's tokens (empty: none).
        note: The author's note's tokens (empty: none).
        entries: Per world-info entry, its keys (lower case) and its tokens.
    """

    spec: ContextSpec
    memory: tuple[int, ...] = ()
    note: tuple[int, ...] = ()
    entries: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...] = ()

    @property
    def version(self) -> str:
        return self.spec.version


def _line(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def encode_spec(spec: ContextSpec, encode: Callable[[str], list[int]]) -> EncodedSpec:
    """Encode ``spec``'s texts with ``encode`` (no start-of-text tokens)."""
    entries = tuple(
        (tuple(k.lower() for k in e["keys"]), tuple(encode(_line(e["text"]))))
        for e in spec.world_info["entries"]
    )
    return EncodedSpec(
        spec,
        tuple(encode(_line(spec.memory))) if spec.memory else (),
        tuple(encode(_line(spec.authors_note))) if spec.authors_note else (),
        entries,
    )


@dataclass(frozen=True)
class Piece:
    """A run of the sequence: path positions ``[lo, hi)`` (``kind == "path"``), or
    injected ``tokens`` of ``kind`` memory, world_info or authors_note."""

    kind: str
    lo: int = 0
    hi: int = 0
    tokens: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return self.hi - self.lo if self.kind == PATH else len(self.tokens)


@dataclass
class Assembled:
    """The sequence the model sees for one path.

    Attributes:
        tokens: Every token id, in order.
        pieces: The same, as path runs and injected runs.
        version: The context version (``ContextSpec.version``).
        kept: Leading tokens the window never drops (start tokens, memory, world info).
        skipped: Document tokens the window dropped after the start tokens.
        note_at: Path position the author's note precedes (None: no note).
        plain: Leading tokens that are path tokens at their own path positions, whose
            KV is the path's own.
    """

    tokens: list[int]
    pieces: list[Piece]
    version: str
    kept: int = 0
    skipped: int = 0
    note_at: int | None = None
    plain: int = field(default=0)

    def spans(self) -> list[tuple[str, int, int]]:
        """(kind, start, end) of every run, in sequence positions."""
        out, col = [], 0
        for piece in self.pieces:
            out.append((piece.kind, col, col + piece.size))
            col += piece.size
        return out

    def injected(self) -> list[tuple[str, int, int]]:
        """(kind, start, end) of the injected runs only (what a context view marks)."""
        return [span for span in self.spans() if span[0] != PATH]


def note_point(path: list[int], start: int, depth: int, is_newline: Callable[[int], bool]) -> int:
    """The path position the author's note goes before: the start of the ``depth``-th
    line from the end of ``path[start:]`` (0: ``len(path)``). Reads only the last
    ``depth`` lines."""
    end = len(path)
    if depth == 0:
        return end
    found = 0
    for i in range(end - 2, start - 1, -1):  # a newline in the last token starts nothing
        if is_newline(path[i]):
            found += 1
            if found == depth:
                return i + 1
    return start


def triggered(
    encoded: EncodedSpec, path: list[int], decode: Callable[[list[int]], str]
) -> list[tuple[int, ...]]:
    """Tokens of each world-info entry whose key is in the last ``scan_depth`` tokens."""
    if not encoded.entries:
        return []
    text = decode(path[-encoded.spec.world_info["scan_depth"] :]).lower()
    return [tokens for keys, tokens in encoded.entries if any(k in text for k in keys)]


def assemble(
    path: list[int],
    encoded: EncodedSpec,
    n_ctx: int,
    *,
    is_newline: Callable[[int], bool],
    decode: Callable[[list[int]], str],
    start_tokens: tuple[int, ...] = (),
    reserve: int = 0,
    world_info: list[tuple[int, ...]] | None = None,
) -> Assembled | None:
    """The sequence for ``path`` under ``encoded``, fitting ``n_ctx - reserve`` tokens;
    None when nothing is injected (the plain path, windowed by the runner as always).
    ``start_tokens``: the tokenizer's start-of-text tokens, kept first when the path
    begins with them. ``world_info``: the entries' tokens to put in instead of scanning
    the path (a generation that refills its window keeps those it started with).
    Raises :class:`ContextError` when the injected text leaves no room for the
    document."""
    wi = triggered(encoded, path, decode) if world_info is None else list(world_info)
    if not (encoded.memory or encoded.note or wi):
        return None
    start = len(start_tokens) if start_tokens and tuple(path[: len(start_tokens)]) == start_tokens else 0  # fmt: skip
    kept = start + len(encoded.memory) + sum(len(t) for t in wi)
    room = n_ctx - reserve - kept - len(encoded.note)
    if room < 1:
        raise ContextError(
            f"memory, world info and the author's note take {kept - start + len(encoded.note)} "
            f"tokens, which leaves no room for the document in {n_ctx - reserve}: shorten them"
        )
    body = len(path) - start
    skipped = 0
    if body > room:
        block = max(1, room // 2)
        skipped = min(body - 1, math.ceil((body - room) / block) * block)
    first = start + skipped  # the document window is path[first:]
    pieces: list[Piece] = [Piece(PATH, 0, start)] if start else []
    if encoded.memory:
        pieces.append(Piece(MEMORY, tokens=encoded.memory))
    pieces += [Piece(WORLD_INFO, tokens=t) for t in wi]
    note_at = None
    if encoded.note:
        note_at = note_point(path, first, encoded.spec.authors_note_depth, is_newline)
        if note_at > first:
            pieces.append(Piece(PATH, first, note_at))
        pieces.append(Piece(AUTHORS_NOTE, tokens=encoded.note))
        if note_at < len(path):
            pieces.append(Piece(PATH, note_at, len(path)))
    elif first < len(path):
        pieces.append(Piece(PATH, first, len(path)))
    tokens: list[int] = []
    plain = 0
    for piece in pieces:
        if piece.kind == PATH:
            if plain == len(tokens) and piece.lo == len(tokens):
                plain += piece.size
            tokens += path[piece.lo : piece.hi]
        else:
            tokens += piece.tokens
    return Assembled(tokens, pieces, encoded.version, kept, skipped, note_at, plain)


@dataclass(frozen=True)
class Assembly:
    """What the model sees during one Loom operation: the loom's contexts (``book``),
    the spec in force (the settings' memory, author's note and world info, or a
    generation's recorded version) and the window. The Loom hands one to its runner
    with every operation (``Runner.context``); a runner calls it for a path's sequence.

    Attributes:
        book: The loom's :class:`ContextBook` (encodings and tokenizer facts).
        spec: The context in force; an inactive one injects nothing.
        n_ctx: The window the sequence must fit.
    """

    book: ContextBook
    spec: ContextSpec
    n_ctx: int

    def __call__(
        self,
        path: list[int],
        reserve: int = 0,
        world_info: list[tuple[int, ...]] | None = None,
    ) -> Assembled | None:
        """The sequence for ``path`` (None when nothing is injected: the plain path),
        leaving ``reserve`` positions free; ``world_info``: entries to keep instead of
        scanning (``ContextKV.refill``)."""
        if not self.spec.active:  # the plain path: nothing more to read
            return None
        return self.book.assemble(path, self.spec, self.n_ctx, reserve, world_info)


class ContextBook:
    """A loom's contexts: the versions nodes recorded, each encoded once, and what the
    tokenizer says about line breaks and start tokens (looked up once per token).

    ``encode(text, at_start)`` and ``decode(tokens)`` are the runner's."""

    def __init__(
        self, encode: Callable[[str, bool], list[int]], decode: Callable[[list[int]], str]
    ) -> None:
        from loomterm.config.injection import ContextVersions

        self.versions = ContextVersions()
        self._encode, self._decode = encode, decode
        self._encoded: dict[str, EncodedSpec] = {}
        self._newline: dict[int, bool] = {}
        self._start: tuple[int, ...] | None = None

    def spec(self, current: ContextSpec, version: str | None) -> ContextSpec:
        """``current`` for None, else the recorded version (``InputError`` if unknown)."""
        if version is None:
            return current
        spec = self.versions.get(version)
        if spec is None:
            from loomterm.errors import InputError

            raise InputError(f"no context version {version!r} in this session")
        return spec

    def is_newline(self, token: int) -> bool:
        known = self._newline.get(token)
        if known is None:
            known = self._newline[token] = "\n" in self._decode([token])
        return known

    def start_tokens(self) -> tuple[int, ...]:
        """What the tokenizer writes before any text (a start-of-text token, or none)."""
        if self._start is None:
            self._start = tuple(self._encode("", True))
        return self._start

    def encoded(self, spec: ContextSpec) -> EncodedSpec:
        version = spec.version
        hit = self._encoded.get(version)
        if hit is None or hit.spec != spec:
            if len(self._encoded) > 64:  # an editing session makes many: keep it bounded
                self._encoded.clear()
            hit = self._encoded[version] = encode_spec(spec, lambda text: self._encode(text, False))
        return hit

    def assemble(
        self,
        path: list[int],
        spec: ContextSpec,
        n_ctx: int,
        reserve: int = 0,
        world_info: list[tuple[int, ...]] | None = None,
    ) -> Assembled | None:
        """:func:`assemble` for ``path`` under ``spec`` (None when nothing is injected)."""
        if not spec.active:
            return None
        return assemble(
            path,
            self.encoded(spec),
            n_ctx,
            is_newline=self.is_newline,
            decode=self._decode,
            start_tokens=self.start_tokens(),
            reserve=reserve,
            world_info=world_info,
        )
