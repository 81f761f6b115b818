"""One llama.cpp model and context in this process, through the binding's C API.

``LlamaContext`` owns the ``llama_model``, the ``llama_context`` (one KV cache shared by
``n_seq`` sequences: ``kv_unified``, so a sequence copied with ``seq_cp`` shares its
cells with the original instead of copying them) and one ``llama_batch``. It speaks in
token ids, sequence ids and positions; which sequence holds which path is the runner's
business (``slots``).

``decode`` evaluates tokens of one or more sequences in chunks of :data:`READ_CHUNK`
(llama.cpp's ``n_ubatch``, which it splits a bigger batch into anyway, so the logits
are the same: between two chunks an interrupt is heard and progress said); when the
cache has no room it asks ``make_room`` to grow the context (``grow``: a new, larger
context with every sequence moved over) or free a sequence, and tries again. Logits come
back as float32 torch tensors, copied out of llama.cpp's buffer (it is reused by the
next call).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from loomterm.engine.llamacpp import binding
from loomterm.engine.llamacpp.first_decode import check_first_decode
from loomterm.errors import InputError, LoomError, ModelLoadError, PrefillCancelled

# llama_decode's return values: 0 done, 1 no KV slot for the batch, 2 aborted.
NO_ROOM = 1
FLASH_ATTN_AUTO = -1  # LLAMA_FLASH_ATTN_TYPE_AUTO: llama.cpp's and llama-server's default
CELL_BLOCK = 256  # llama.cpp rounds a context's cells up to a multiple of this
PIECE_BYTES = 256
# Tokens per llama_decode in a long read: one call cannot be stopped, and 2,048 tokens
# (n_batch) take a minute on one busy core; llama.cpp splits them by this anyway.
READ_CHUNK = 512
_LOG_KEEP = 4  # GGML_LOG_LEVEL_ERROR: llama.cpp's chatter (model loading) is dropped
_init_lock = threading.Lock()
_initialized: list[object] = []  # the log callback, kept alive for llama.cpp
_muted = threading.Event()  # set while a failure is expected and handled (seq_restore)


def default_threads() -> int:
    """Physical cores less one (``engine.threads.default_threads``: llama-server's one
    per core slows several times over when another process takes a core)."""
    from loomterm.engine.threads import default_threads as shared

    return shared("llama.cpp")


def _int(text: str | None) -> int:
    """A GGUF number written as text, or 0."""
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _backend(lib) -> None:
    with _init_lock:
        if _initialized:
            return

        @lib.llama_log_callback
        def quiet(level: int, text: bytes, _data) -> None:  # pragma: no cover - C calls it
            if level == _LOG_KEEP and text and not _muted.is_set():
                os.write(2, text)

        lib.llama_log_set(quiet, ctypes.c_void_p(0))
        lib.llama_backend_init()
        _initialized.append(quiet)


class LlamaContext:
    """A GGUF model loaded by llama.cpp, with a multi-sequence context.

    Attributes:
        lib: The binding's C API module (``llama_cpp.llama_cpp``).
        path: The GGUF file.
        vocab_size: Tokens of the vocabulary.
        n_ctx_train: The context length the model was trained with.
        cells: KV cells of the context now, shared by all sequences (allocated whole).
        max_cells: The most cells it may grow to (``grow``). ``cells`` given as a
            callable ``cells(n_ctx_train, kv_bytes_per_cell)`` returns the first size and
            this; given as a number, the context starts and stays at that size.
        n_seq: Sequences the context holds (``n_seq_max``).
        n_batch: Most tokens one ``llama_decode`` takes.
        threads: CPU threads for decoding and prompt evaluation.
        interrupt: When set, a long evaluation stops between chunks
            (:class:`~loomterm.errors.PrefillCancelled`).
        progress: ``progress(stage, done, total)`` between chunks of a long evaluation.
        make_room: Called with the sequences in use when the cache is full; returns
            True after freeing cells (``decode`` then retries), False when it cannot.
        evaluated: Tokens evaluated so far (what an operation cost).
    """

    def __init__(
        self,
        path: Path,
        cells: int | Callable[[int, int], tuple[int, int]] | None,
        n_seq: int,
        threads: int | None = None,
    ) -> None:
        lib = binding.load()
        check_first_decode(lib, path)  # once per library: a build that crashes says so
        _backend(lib)
        self.lib = lib
        self.path = path
        params = lib.llama_model_default_params()
        params.n_gpu_layers = (
            0
            if not os.environ.get("LOOMTERM_LLAMA_GPU_LAYERS")
            else int(os.environ["LOOMTERM_LLAMA_GPU_LAYERS"])
        )
        self.model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise ModelLoadError(f"llama.cpp cannot load {path} (not a GGUF model it knows)")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(self.model))
        self.threads = threads or default_threads()
        self._n_seq = n_seq
        first: int | None
        if callable(cells):  # sized from what the model was trained with, and its KV size
            try:
                first, most = cells(self.n_ctx_train, self.kv_bytes_per_cell())
            except BaseException:
                lib.llama_model_free(self.model)
                raise
        else:
            first, most = cells, cells or self.n_ctx_train
        self.ctx = self._open(first or self.n_ctx_train)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise ModelLoadError(
                f"llama.cpp cannot make a context of {first} cells for {path.name}"
            )
        self.memory = lib.llama_get_memory(self.ctx)
        self.cells = int(lib.llama_n_ctx(self.ctx))
        self.max_cells = max(self.cells, -(-most // CELL_BLOCK) * CELL_BLOCK)
        self.n_seq = int(lib.llama_n_seq_max(self.ctx))
        self.n_batch = int(lib.llama_n_batch(self.ctx))
        self.can_shift = bool(lib.llama_memory_can_shift(self.memory))
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.interrupt: threading.Event | None = None
        self.progress: Callable[[str, int, int | None], None] | None = None
        self.make_room: Callable[[set[int]], bool] = lambda _seqs: False
        self._piece = ctypes.create_string_buffer(PIECE_BYTES)
        self.evaluated = 0  # tokens evaluated so far (the tests and the bench read it)

    def _open(self, cells: int):
        """A new ``llama_context`` of ``cells`` cells on the model (NULL when llama.cpp
        cannot make it)."""
        lib = self.lib
        context = lib.llama_context_default_params()
        context.n_ctx = cells
        context.n_seq_max = self._n_seq
        context.kv_unified = True  # siblings share their prefix's cells (seq_cp)
        # llama.cpp's defaults, as llama-server runs them (flash attention on where the
        # device has it: the CPU does; n_batch 2048, n_ubatch 512), so the same tokens give
        # the server's logits and its greedy tokens. Flash attention also skips the cells of
        # other sequences (masked) instead of multiplying them in.
        context.flash_attn_type = FLASH_ATTN_AUTO
        context.n_threads = context.n_threads_batch = self.threads
        context.no_perf = True
        return lib.llama_init_from_model(self.model, context)

    def grow(self, cells: int) -> bool:
        """Move every sequence into a new, larger context of ``cells`` cells and free the
        old one; False (the old context kept, nothing moved) when llama.cpp cannot make it.

        The whole cache moves as one state (``llama_state_get_data`` /
        ``llama_state_set_data``): the same cells with their positions and sequences, so
        prefixes shared by ``seq_cp`` stay shared and every sequence gives the logits it
        gave before. Called after a failed ``llama_decode`` or before an evaluation,
        never between ``seq_add`` and the next decode: a pending key shift is applied by
        ``llama_decode`` and would not move with the state."""
        lib = self.lib
        size = int(lib.llama_state_get_size(self.ctx))
        buf = (ctypes.c_uint8 * size)()
        written = int(lib.llama_state_get_data(self.ctx, buf, size))
        _muted.set()  # a context llama.cpp cannot allocate is an answer here
        try:
            new = self._open(cells)
        finally:
            _muted.clear()
        if not new:
            return False
        if int(lib.llama_state_set_data(new, buf, written)) != written:
            lib.llama_free(new)
            return False
        lib.llama_free(self.ctx)
        self.ctx = new
        self.memory = lib.llama_get_memory(new)
        self.cells = int(lib.llama_n_ctx(new))
        return True

    # -- facts -------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text (``general.name``), or None."""
        buf = ctypes.create_string_buffer(512)
        n = self.lib.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def kv_bytes_per_cell(self) -> int:
        """Bytes one cached token takes: keys and values of every layer, float16 (what
        llama.cpp allocates per cell, sliding-window layers included: their cache is full
        size). A head's width is the GGUF's ``key_length``/``value_length`` where it gives
        them (Gemma 3's heads are wider than ``n_embd / n_head``)."""
        lib, model = self.lib, self.model
        heads = max(1, int(lib.llama_model_n_head(model)))
        width = int(lib.llama_model_n_embd(model)) // heads
        arch = self.meta("general.architecture") or ""
        key = _int(self.meta(f"{arch}.attention.key_length")) or width
        value = _int(self.meta(f"{arch}.attention.value_length")) or width
        layers = int(lib.llama_model_n_layer(model))
        return layers * int(lib.llama_model_n_head_kv(model)) * (key + value) * 2

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    # -- text ------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool) -> list[int]:
        """llama.cpp's tokens of ``text``; special tokens written out are parsed."""
        data = text.encode("utf-8")
        room = len(data) + 8
        out = (ctypes.c_int32 * room)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), out, room, add_special, True)
        if n < 0:  # more tokens than bytes (cannot happen with byte-level BPE): retry
            room = -n
            out = (ctypes.c_int32 * room)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), out, room, add_special, True)
        return list(out[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes token ``token`` stands for (special tokens as their text)."""
        n = self.lib.llama_token_to_piece(self.vocab, token, self._piece, PIECE_BYTES, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, -n, 0, True)
            return buf.raw[:n]
        return self._piece.raw[:n]

    # -- sequences ---------------------------------------------------------------------
    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> None:
        """Drop ``seq``'s cells at positions ``[p0, p1)`` (-1: to the end)."""
        if not self.lib.llama_memory_seq_rm(self.memory, seq, p0, p1):
            raise LoomError(f"llama.cpp could not cut sequence {seq} at {p0}")

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """``dst`` shares ``src``'s cells at positions ``[p0, p1)`` (no data is copied)."""
        self.lib.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move ``seq``'s cells at ``[p0, p1)`` by ``delta`` positions; llama.cpp
        re-rotates their keys before the next evaluation."""
        self.lib.llama_memory_seq_add(self.memory, seq, p0, p1, delta)

    def seq_keep(self, seq: int) -> None:
        """Drop every cell not in ``seq``."""
        self.lib.llama_memory_seq_keep(self.memory, seq)

    def seq_pos_max(self, seq: int) -> int:
        """The last position ``seq`` holds (-1 when empty)."""
        return int(self.lib.llama_memory_seq_pos_max(self.memory, seq))

    def seq_save(self, seq: int) -> bytes:
        """A copy of ``seq``'s cells (``llama_state_seq_get_data``), kept off the cache."""
        size = int(self.lib.llama_state_seq_get_size(self.ctx, seq))
        buf = (ctypes.c_uint8 * size)()
        written = int(self.lib.llama_state_seq_get_data(self.ctx, buf, size, seq))
        return ctypes.string_at(buf, written)  # one copy (slicing would make a list)

    def seq_restore(self, data: bytes, seq: int) -> bool:
        """Put a :meth:`seq_save` copy back as the (empty) sequence ``seq``, in cells of
        its own; False when the cache has no room for it."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        _muted.set()  # no room is an answer here, not an error to print
        try:
            return int(self.lib.llama_state_seq_set_data(self.ctx, buf, len(data), seq)) > 0
        finally:
            _muted.clear()

    # -- evaluation --------------------------------------------------------------------
    def decode(
        self, tokens: Sequence[int], seq: int, start: int, busy: set[int] | None = None
    ) -> torch.Tensor:
        """Evaluate ``tokens`` at positions ``start..`` of ``seq``; returns the (V,)
        logits after the last one. ``busy``: sequences ``make_room`` must keep."""
        total = len(tokens)
        done = 0
        logits = None
        while done < total:
            if self.interrupt is not None and self.interrupt.is_set():
                raise PrefillCancelled(evaluated=done)  # cells now held
            count = min(self.n_batch, READ_CHUNK, total - done)
            rows = [(tokens[done + i], start + done + i, seq) for i in range(count)]
            last = done + count == total
            self._run(rows, [count - 1] if last else [], busy or {seq})
            if last:
                logits = self._logits(1)[0]
            done += count
            if self.progress is not None and total > count:
                self.progress("prefill", done, total)
        assert logits is not None, "decode needs at least one token"
        return logits

    def decode_rows(self, rows: Sequence[tuple[int, int, int]]) -> torch.Tensor:
        """One token per (token, position, sequence) row, all in one batch; returns
        their (rows, V) logits, in order."""
        self._run(rows, list(range(len(rows))), {seq for _t, _p, seq in rows})
        return self._logits(len(rows))

    def _run(self, rows: Sequence[tuple[int, int, int]], outputs: list[int], busy: set[int]):
        batch = self.batch
        for i, (token, pos, seq) in enumerate(rows):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 0
        for i in outputs:
            batch.logits[i] = 1
        batch.n_tokens = len(rows)
        while True:
            code = self.lib.llama_decode(self.ctx, batch)
            if code == 0:
                self.evaluated += len(rows)
                return
            if code == NO_ROOM and self.make_room(busy):
                # llama.cpp undid the failed batch's cells: the same batch goes again.
                continue
            if code == NO_ROOM:
                raise LoomError(
                    f"llama.cpp's cache of {self.cells} tokens is full: lower n_ctx, generate "
                    "fewer siblings, or raise --kv-budget"
                )
            raise LoomError(f"llama.cpp failed to evaluate the batch (llama_decode {code})")

    def _logits(self, rows: int) -> torch.Tensor:
        pointer = self.lib.llama_get_logits(self.ctx)
        out = torch.empty(rows, self.vocab_size)  # (rows, V)
        # One memmove: numpy's ctypes view builds a new array type on every call.
        ctypes.memmove(out.data_ptr(), pointer, out.numel() * out.element_size())
        return out

    def close(self) -> None:
        """Free the batch, the context and the model (once)."""
        if getattr(self, "ctx", None):
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = None


def cells_for(wanted: int, window: int, per_cell: int, budget: int) -> int:
    """Cells for the context: ``wanted``, fewer where the budget cannot hold them, never
    fewer than one ``window``; a one-line error when the budget cannot hold that."""
    fit = budget // per_cell // CELL_BLOCK * CELL_BLOCK
    padded = -(-wanted // CELL_BLOCK) * CELL_BLOCK
    if fit < window:
        need = -(-window // CELL_BLOCK) * CELL_BLOCK * per_cell
        raise InputError(
            f"--kv-budget {_mib(budget)} holds {budget // per_cell} tokens of this model's KV: "
            f"its context "
            f"window of {window} tokens needs {_mib(need)}; raise it or lower --n-ctx"
        )
    return min(padded, fit)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
