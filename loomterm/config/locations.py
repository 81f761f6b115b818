"""The one place that asks platformdirs where loomterm keeps its files.

Each folder can be moved with an environment variable, which tests and CI use to keep
their files apart from a user's.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from platformdirs import user_cache_dir, user_config_dir, user_data_dir, user_documents_dir

from loomterm.config.cpu_target import this_build_name

APP_NAME = "loomterm"
# The test suite's cache (tests/conftest.py): its llama.cpp build is found from here too.
TEST_CACHE_NAME = "loomterm-tests"


def _folder(env_var: str, default: str) -> Path:
    path = Path(os.environ.get(env_var) or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """Downloaded wheels and converted models (``LOOMTERM_CACHE_DIR``)."""
    return _folder("LOOMTERM_CACHE_DIR", user_cache_dir(APP_NAME))


def data_dir() -> Path:
    """Sessions (``LOOMTERM_DATA_DIR``)."""
    return _folder("LOOMTERM_DATA_DIR", user_data_dir(APP_NAME))


def config_dir() -> Path:
    """Settings, key maps and user themes (``LOOMTERM_CONFIG_DIR``)."""
    return _folder("LOOMTERM_CONFIG_DIR", user_config_dir(APP_NAME))


def documents_dir() -> Path:
    """Where the export dialog first offers to write (``LOOMTERM_DOCUMENTS_DIR``): the
    user's documents folder, or the home folder where there is none. Not created:
    exports go to a folder the user knows, never one made for them."""
    given = os.environ.get("LOOMTERM_DOCUMENTS_DIR")
    if given:
        return Path(given).expanduser()
    folder = Path(user_documents_dir())
    return folder if folder.is_dir() else Path.home()


def journal_dirs() -> list[Path]:
    """Where changes a session file could not take are kept (``loomterm.store.journal``),
    first to last: beside the data folder (so a data folder made read-only or removed
    does not take it along), then in the temporary folder (most often another file
    system than a full one). Not created here."""
    data = Path(os.environ.get("LOOMTERM_DATA_DIR") or user_data_dir(APP_NAME))
    user = os.getuid() if hasattr(os, "getuid") else 0
    return [
        data.parent / f"{data.name}-journal",
        Path(tempfile.gettempdir()) / f"loomterm-journal-{user}",
    ]


def sessions_dir() -> Path:
    """Where named sessions live."""
    path = data_dir() / "sessions"
    path.mkdir(parents=True, exist_ok=True)
    return path


# llama.cpp, built once from llama-cpp-python's source distribution of this version
# (``loomterm.serving.llama_build``), read by the server tests and the llama.cpp runner.
LLAMA_CPP_VERSION = "0.3.36"


def llama_cpp_dir() -> Path:
    """The llama.cpp build for this CPU: ``bin/llama-server``, ``lib/`` (libllama and
    libggml*, shared) and ``python/`` (the ``llama_cpp`` binding, pure Python), in a
    folder named for the instruction sets it is compiled for (``cpu_target``): a cache
    moved to another CPU builds again rather than crash. Not created here."""
    return cache_dir() / "llama.cpp" / LLAMA_CPP_VERSION / this_build_name()


def test_cache_dir() -> Path:
    """The test suite's shared cache folder (``~/.cache/loomterm-tests``), where the
    tests build llama.cpp and keep the default model. Not created here."""
    return Path.home() / ".cache" / TEST_CACHE_NAME


def llama_cpp_dirs() -> list[Path]:
    """Where an existing llama.cpp build of this version may be, first to last: this
    cache's (``llama_cpp_dir``), then the test suite's (the tests build it there), so
    that a build made by either serves the runner and the bench. Not created here."""
    tests = test_cache_dir() / "llama.cpp" / LLAMA_CPP_VERSION / this_build_name()
    folders = [llama_cpp_dir(), tests]
    return list(dict.fromkeys(folders))
