"""The real llama.cpp binding, built once into the test cache from llama-cpp-python's
source distribution (the same cmake build as tests/remote/'s llama-server), and the
default model's GGUF file.

Where it cannot be built (no cmake, no compiler, no network for the source), these tests
skip with one line saying why; with ``LOOMTERM_REQUIRE_ALL_TESTS`` set (CI) that is a
failure instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from loomterm.errors import LoomError
from tests.helpers import build_log, require_or_skip
from tests.tui.test_tmux import Tmux, loomterm_command

THREADS = 1  # steady on a busy machine; the results do not depend on it


@pytest.fixture(scope="session")
def llama_build(test_cache_dir) -> Path:
    """The build's folder (server, library, binding), built first if missing."""
    from loomterm.serving.llama_build import ensure_llama_cpp

    try:
        return ensure_llama_cpp(build_log)
    except LoomError as exc:
        require_or_skip(False, str(exc))
        raise AssertionError("unreachable") from None


@pytest.fixture(scope="session")
def binding(llama_build, default_gguf):
    """The ``llama_cpp.llama_cpp`` module, loaded from the build once a child process
    decoded with it (``first_decode``)."""
    from loomterm.engine.llamacpp import binding as finder
    from loomterm.engine.llamacpp.first_decode import check_first_decode

    try:
        module = finder.load()
    except LoomError as exc:
        require_or_skip(False, str(exc))
        raise AssertionError("unreachable") from None
    try:  # a build that crashes on this CPU fails these tests, not the whole run
        check_first_decode(module, default_gguf)
    except LoomError as exc:
        pytest.fail(str(exc), pytrace=False)
    return module


@pytest.fixture(scope="session")
def default_gguf(test_cache_dir) -> Path:
    from loomterm.engine.models.default import default_gguf_path

    try:
        return default_gguf_path()
    except LoomError as exc:
        require_or_skip(False, f"no default model GGUF: {exc}")
        raise AssertionError("unreachable") from None


class Fresh:
    """A fresh llama.cpp evaluation: its own one-sequence context, emptied before each
    path, which evaluates the whole path in one go."""

    def __init__(self, path: Path) -> None:
        from loomterm.engine.llamacpp.context import LlamaContext

        self.llama = LlamaContext(path, cells=2048, n_seq=1, threads=THREADS)

    def logits(self, tokens: list[int]) -> torch.Tensor:
        self.llama.seq_rm(0, -1, -1)
        return self.llama.decode(tokens, 0, 0)


@pytest.fixture(scope="session")
def fresh(binding, default_gguf) -> Fresh:
    return Fresh(default_gguf)


def kl(want: torch.Tensor, got: torch.Tensor) -> float:
    """KL(want || got) of the two next-token distributions."""
    p, q = torch.log_softmax(want.double(), -1), torch.log_softmax(got.double(), -1)
    return float((p.exp() * (p - q)).sum())


# A fresh evaluation and the same tokens evaluated in pieces, or beside other sequences
# of a shared cache, differ by llama.cpp's rounding: its batched and single-token kernels
# round differently, and flash attention (on, as in llama-server) accumulates values in
# float16 in the order the cells sit in the cache. Measured over these tests: typically
# 2e-3 nats, at most 1.0e-2 (a refreshed path whose cells are out of position order).
# A stale or misplaced cell costs far more (tenths of a nat and up).
EXACT_KL = 0.02


@pytest.fixture
def term(tmp_path, isolated_dirs, monkeypatch):
    """One tmux pane with the test's folders and ``PYTHONPATH`` passed on."""
    from tests.tui import test_tmux

    monkeypatch.setattr(test_tmux, "WIDTH", 150)  # room for the status bar's state
    require_or_skip(shutil.which("tmux"), "tmux is not installed")
    command = loomterm_command()
    require_or_skip(command, "the loomterm command is not installed (pip install -e .)")
    names = ("LOOMTERM_DATA_DIR", "LOOMTERM_CONFIG_DIR", "LOOMTERM_CACHE_DIR", "PYTHONPATH")
    env = {name: os.environ[name] for name in names if os.environ.get(name)}
    if "PYTHONPATH" in env:  # the pane runs in another folder: absolute entries
        parts = env["PYTHONPATH"].split(os.pathsep)
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in parts if p)
    tmux = Tmux(f"loomterm-llamacpp-{os.getpid()}", tmp_path, env)
    tmux.command = command
    yield tmux
    tmux.kill()
