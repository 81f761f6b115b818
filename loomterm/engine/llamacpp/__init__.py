"""llama.cpp in this process behind the Loom (``--backend llama.cpp``).

``open_gguf`` makes the runner (``runner.LlamaCppRunner``) for a ``.gguf`` file, or the
default model's GGUF file when none is named. The binding comes from loomterm's own
llama.cpp build or an installed llama-cpp-python (``binding``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loomterm.errors import InputError

if TYPE_CHECKING:
    from loomterm.engine.llamacpp.runner import LlamaCppRunner
    from loomterm.engine.runner import Progress


def gguf_file(model: str | None, progress: Progress | None = None) -> Path:
    """The GGUF file ``model`` names (None: the default model's; a catalogue name such
    as ``gemma3-270m``: that model's, fetched once)."""
    if model is None:
        from loomterm.engine.models.default import default_gguf_path

        return default_gguf_path(progress)
    from loomterm.engine.models.shipped import shipped

    path = Path(model).expanduser()
    known = shipped(str(model)) if not path.exists() else None
    if known is not None:
        return known.gguf_path(progress)
    if path.suffix.lower() != ".gguf":
        raise InputError(f"{model}: the llama.cpp backend runs a .gguf file")
    if not path.is_file():
        raise InputError(f"{model}: no such GGUF file")
    return path


def open_gguf(
    model: str | None,
    n_ctx: int | None = None,
    threads: int | None = None,
    progress: Progress | None = None,
    kv_budget: int | str | None = None,
) -> LlamaCppRunner:
    """A llama.cpp runner on ``model`` (see ``gguf_file``); ``kv_budget`` caps its KV
    bytes as the torch runner's (``runner.LlamaCppRunner``)."""
    from loomterm.engine.llamacpp import binding
    from loomterm.engine.llamacpp.first_decode import check_first_decode
    from loomterm.engine.llamacpp.runner import LlamaCppRunner

    path = gguf_file(model, progress)
    check_first_decode(binding.load(), path, progress)
    if progress is not None:
        progress("load", 0, None)
    return LlamaCppRunner(path, n_ctx=n_ctx, threads=threads, kv_budget=kv_budget)
