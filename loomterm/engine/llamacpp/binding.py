"""Find and import the ``llama_cpp`` binding (llama-cpp-python's low-level API).

Two places, in this order:

1. loomterm's own build (``python -m loomterm.serving.llama_build``, the same cmake build
   as the server tests' llama-server): the binding's pure-Python package in
   ``<build>/python``, loading the shared library in ``<build>/lib`` through
   ``LLAMA_CPP_LIB_PATH`` (a folder; read once, when ``llama_cpp`` is imported). The
   build is looked for in this cache and then in the test suite's, where the tests
   build it (``locations.llama_cpp_dirs``);
2. a ``llama_cpp`` package installed in this Python (``pip install llama-cpp-python``),
   with its own library.

Either must have the sequence API the runner uses (``llama_memory_seq_*``, 0.3.10 on).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from loomterm.config import locations
from loomterm.errors import LoomError

LIB_ENV = "LLAMA_CPP_LIB_PATH"
NEEDED = ("llama_memory_seq_rm", "llama_memory_seq_cp", "llama_memory_seq_add", "llama_batch_init")
BUILD_HINT = "loomterm build-llama"


class BindingError(LoomError):
    """The llama.cpp binding is missing or unusable (one line: what to do)."""


def own_build() -> tuple[Path, Path] | None:
    """(python folder, library folder) of the first complete build of loomterm's in
    ``locations.llama_cpp_dirs()``, or None."""
    for home in locations.llama_cpp_dirs():
        python, lib = home / "python", home / "lib"
        if (python / "llama_cpp" / "llama_cpp.py").is_file() and any(lib.glob("libllama.*")):
            return python, lib
    return None


def available() -> bool:
    """Whether the binding can be imported, without importing it (``auto`` asks)."""
    if "llama_cpp" in sys.modules or own_build() is not None:
        return True
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def load() -> ModuleType:
    """The ``llama_cpp.llama_cpp`` module (the C API), imported once.

    Raises :class:`BindingError` with one line when it is missing or too old."""
    module = sys.modules.get("llama_cpp.llama_cpp")
    if module is None:
        build = own_build() if "llama_cpp" not in sys.modules else None
        if build is not None:
            python, lib = build
            os.environ.setdefault(LIB_ENV, str(lib))
            if str(python) not in sys.path:
                sys.path.insert(0, str(python))
        elif not available():
            raise BindingError(
                f"llama.cpp is not built here: run `{BUILD_HINT}` (about 15 minutes on 2 "
                "cores) or install llama-cpp-python"
            )
        try:
            module = importlib.import_module("llama_cpp.llama_cpp")
        except ImportError as exc:
            raise BindingError(
                f"the llama_cpp binding cannot be imported ({exc}): reinstall loomterm (its "
                f"dependencies) and run `{BUILD_HINT}`"
            ) from None
        except (OSError, RuntimeError) as exc:
            raise BindingError(f"llama.cpp's library cannot be loaded: {exc}") from None
    missing = [name for name in NEEDED if not hasattr(module, name)]
    if missing:
        version = getattr(sys.modules.get("llama_cpp"), "__version__", "?")
        raise BindingError(
            f"llama_cpp {version} lacks {missing[0]}: use llama-cpp-python "
            f"{locations.LLAMA_CPP_VERSION} (`{BUILD_HINT}`)"
        )
    return module


LIBRARY_NAMES = ("libllama.so", "libllama.dylib", "llama.dll")


def library_path(module: ModuleType) -> str:
    """The shared library the binding loaded (for the status line and tests), found as
    llama-cpp-python finds it: in the folder ``LLAMA_CPP_LIB_PATH`` names, else in the
    package's own ``lib`` folder; empty when neither holds one."""
    named = os.environ.get(LIB_ENV)
    package = Path(module.__file__ or ".").resolve().parent
    for folder in (Path(named),) if named else (package / "lib", package):
        for name in LIBRARY_NAMES:
            if (folder / name).is_file():
                return str((folder / name).resolve())
    return ""
