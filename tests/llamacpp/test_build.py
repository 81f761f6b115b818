"""One cmake build serves both llama-server and the binding: the server runs from the
cache with the shared libraries beside it (found through its rpath, no environment), and
the binding's package holds Python only (its own C++ build was turned off)."""

from __future__ import annotations

import os
import subprocess


def test_one_build_serves_the_server_and_the_binding(llama_build):
    server = llama_build / "bin" / "llama-server"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(
        [str(server), "--version"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr[-300:]
    assert "version" in (done.stdout + done.stderr).lower()
    lib = llama_build / "lib"
    assert (lib / "libllama.so").resolve().is_file()
    assert {"libggml.so", "libggml-base.so", "libggml-cpu.so"} <= {p.name for p in lib.iterdir()}
    python = llama_build / "python"
    assert (python / "llama_cpp" / "llama_cpp.py").is_file()
    assert not [p for p in python.rglob("*.so*")]  # no second copy of the library
    assert not (llama_build / "source").exists() and not (llama_build / "build").exists()
