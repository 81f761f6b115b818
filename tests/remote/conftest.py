"""A real llama-server for the remote runner's tests: built once into the test cache,
started on 127.0.0.1 on a free port with the default model's GGUF, stopped after.

Where llama-server cannot be built (no cmake, no compiler), these tests skip with one
line saying why; with ``LOOMTERM_REQUIRE_ALL_TESTS`` set (CI on this machine) that is a
failure instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loomterm.errors import LoomError
from tests.helpers import build_log

REQUIRE_ALL = "LOOMTERM_REQUIRE_ALL_TESTS"
N_CTX = 1024  # per slot
SLOTS = 4


def _skip_or_fail(reason: str) -> None:
    if os.environ.get(REQUIRE_ALL, "") not in ("", "0"):
        pytest.fail(f"{reason} (and {REQUIRE_ALL} is set: these tests must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llama_server_binary(test_cache_dir) -> Path:
    from loomterm.serving.llama_build import ensure_llama_server

    try:
        return ensure_llama_server(build_log)
    except LoomError as exc:
        _skip_or_fail(str(exc))
        raise AssertionError("unreachable") from None


@pytest.fixture(scope="session")
def default_gguf(test_cache_dir) -> Path:
    from loomterm.engine.models.default import default_gguf_path

    try:
        return default_gguf_path()
    except LoomError as exc:
        _skip_or_fail(f"no default model GGUF: {exc}")
        raise AssertionError("unreachable") from None


def start_server(binary: Path, model: Path, **options):
    from loomterm.serving.llama_server import LlamaServer

    options.setdefault("n_ctx", N_CTX)
    options.setdefault("slots", SLOTS)
    options.setdefault("threads", 2)
    return LlamaServer(binary, model, **options).start()


@pytest.fixture(scope="session")
def llama_server(llama_server_binary, default_gguf):
    """One shared llama-server for the operation tests (never killed by a test)."""
    server = start_server(llama_server_binary, default_gguf)
    yield server
    server.stop()


@pytest.fixture
def own_server(llama_server_binary, default_gguf):
    """A llama-server of the test's own, which it may kill; ``start(**options)``."""
    started = []

    def start(model: Path | None = None, **options):
        server = start_server(llama_server_binary, model or default_gguf, **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
