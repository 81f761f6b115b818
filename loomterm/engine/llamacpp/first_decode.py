"""A llama.cpp library's first decode, tried once in a child process.

A build whose kernels crash on this CPU kills the process that decodes with it by a
signal: a build for another CPU's instruction sets (a cache carried between machines)
did, and so did a native build's AMX kernels (in ``ggml_backend_amx_mul_mat``). In the
editor that process would be the editor, gone without a word. So before a library
decodes in this process the first time, the model's first three tokens are decoded in a
child process. A child killed by a signal becomes one line (:class:`BindingError`) that
says what to do; a child that decoded is remembered by a marker file named for the
library and the model file (each one's path, size and time: which kernels run depends on
the model's weight types), so the check costs one extra model load per model and build,
not one per start. A child that fails otherwise (a file llama.cpp cannot read) or hangs
is not remembered, and the load in this process then goes on as without the check.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from loomterm.config import locations
from loomterm.engine.llamacpp.binding import BUILD_HINT, BindingError, library_path
from loomterm.progress import Progress, ProgressCallback

CHILD_ENV = "LOOMTERM_LLAMA_FIRST_DECODE"  # set in the child: it does not check again
STAGE = "llama.cpp check"
TIMEOUT_S = 600
CHILD = """
import sys
from pathlib import Path
from loomterm.engine.llamacpp.context import LlamaContext
LlamaContext(Path(sys.argv[1]), cells=64, n_seq=1, threads=1).decode([1, 2, 3], 0, 0)
"""

_checked: set[str] = set()  # (library, model) pairs this process has checked


def check_first_decode(
    module: ModuleType, gguf: Path, progress: ProgressCallback | None = None
) -> None:
    """Decode ``gguf`` with ``module``'s library in a child process first, once per
    library and model; raises :class:`BindingError` if that kills the child."""
    if os.environ.get(CHILD_ENV):
        return
    library = library_path(module)
    marker = marker_path(library, gguf)
    if marker is None or marker.name in _checked or marker.exists():
        return
    try:
        with Progress(progress).timed(STAGE):
            child = subprocess.run(
                [sys.executable, "-c", CHILD, str(gguf)],
                env={**os.environ, CHILD_ENV: "1"},
                capture_output=True,
                timeout=TIMEOUT_S,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired):
        return  # no verdict: the load in this process goes on
    if child.returncode < 0:
        name = signal.Signals(-child.returncode).name
        raise BindingError(
            f"llama.cpp's library {library} dies on its first decode of {gguf.name} on this "
            f"CPU ({name}): delete its build and run `{BUILD_HINT}` to build it for this CPU"
        )
    _checked.add(marker.name)
    if child.returncode == 0:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{library}\n{Path(gguf).resolve()}\n")


def marker_path(library: str, gguf: Path) -> Path | None:
    """Where a library that decoded ``gguf`` is remembered; None when either file
    cannot be found."""
    if not library:
        return None
    key = []
    for path in (Path(library), Path(gguf)):
        try:
            stat = path.stat()
        except OSError:
            return None
        key.append(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}")
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
    return locations.cache_dir() / "llama.cpp" / "decodes" / digest
