"""llama.cpp as a peer: its greedy decode of the same GGUF file, same threads, same run.

Two ways to reach it, the first that is present:

- a ``llama-server`` binary: ``LOOMTERM_LLAMA_SERVER``, else ``llama-server`` on the
  ``PATH``, else one built by ``serving.llama_build`` into loomterm's cache folder or
  the test suite's (``<cache>/llama.cpp/<version>/<cpu>/bin/llama-server``,
  ``locations.llama_cpp_dirs``). It is
  started on a free loopback port for the measurement and stopped after it; its own timings (prompt and
  predicted milliseconds, measured inside the server) are used, so HTTP costs nothing;
- ``llama-cpp-python`` (``import llama_cpp``), in this process.

The work is loomterm's plain decode row's: the same prompt token ids (the GGUF file
carries the same vocabulary), a fixed number of greedy tokens (end of sequence
ignored), the prompt's evaluation included. ``measure`` returns rates, or a one-line
reason why llama.cpp could not be measured (the bench row then says so).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60.0
BUILD_HINT = "python -m loomterm.serving.llama_build"
REQUEST_TIMEOUT_S = 300.0


@dataclass
class PeerRun:
    """One greedy completion: tokens made, and seconds for the prompt and the decode."""

    tokens: int
    prompt_seconds: float
    decode_seconds: float
    tokens_made: tuple[int, ...] = ()  # the token ids, where the peer says them

    @property
    def rate(self) -> float:
        """Tokens per second, the prompt's evaluation included."""
        return self.tokens / max(self.prompt_seconds + self.decode_seconds, 1e-9)

    @property
    def decode_rate(self) -> float:
        return self.tokens / max(self.decode_seconds, 1e-9)


def gguf_of(loaded) -> Path | None:
    """The GGUF file ``loaded`` came from: a ``.gguf`` source, or the default model's
    downloaded file (never downloaded here). None for Hugging Face folders."""
    from loomterm.config import locations
    from loomterm.engine.models.default import DEFAULT_GGUF_MEMBER
    from loomterm.engine.models.load import DEFAULT_MODEL_NAME

    source = str(loaded.source or "")
    if source.lower().endswith(".gguf") and Path(source).is_file():
        return Path(source)
    if source == DEFAULT_MODEL_NAME:  # this cache's download, else the test suite's
        name = Path(DEFAULT_GGUF_MEMBER).name
        for cache in (locations.cache_dir(), locations.test_cache_dir()):
            if (cache / "downloads" / name).is_file():
                return cache / "downloads" / name
    return None


def find_llama_server() -> Path | None:
    """See the module docstring for where it is looked for."""
    from loomterm.config import locations

    given = os.environ.get("LOOMTERM_LLAMA_SERVER")
    if given:
        return Path(given) if Path(given).is_file() else None
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    for home in locations.llama_cpp_dirs():  # this cache's build, then the tests'
        built = home / "bin" / "llama-server"
        if built.is_file() and os.access(built, os.X_OK):
            return built
    return None


def server_decode(
    gguf: Path, prompt: list[int], new_tokens: int, threads: int, reps: int
) -> list[PeerRun] | str:
    """Like ``measure``, always with llama-server (its own timings, and its tokens)."""
    server = find_llama_server()
    if server is None:
        return f"llama-server not built: run `{BUILD_HINT}` (about 15 minutes on 2 cores)"
    try:
        return _with_server(server, gguf, prompt, new_tokens, threads, reps)
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        return f"llama-server failed: {str(exc)[:120]}"


def measure(
    gguf: Path, prompt: list[int], new_tokens: int, threads: int, reps: int
) -> list[PeerRun] | str:
    """``reps`` greedy completions of ``new_tokens`` after ``prompt`` (after one
    warm-up), or why they could not be run."""
    server = find_llama_server()
    if server is not None:  # its own timings, measured inside the server
        try:
            return _with_server(server, gguf, prompt, new_tokens, threads, reps)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            return f"llama-server failed: {str(exc)[:120]}"
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama.cpp not found (pip install llama-cpp-python, or LOOMTERM_LLAMA_SERVER)"
    try:
        return _with_python(gguf, prompt, new_tokens, threads, reps)
    except Exception as exc:  # noqa: BLE001 - a peer failing must not stop the bench
        return f"llama-cpp-python failed: {str(exc)[:120]}"


# -- llama-cpp-python ---------------------------------------------------------------------------
def _with_python(gguf: Path, prompt: list[int], new_tokens: int, threads: int, reps: int):
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(gguf),
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=len(prompt) + new_tokens + 16,
        verbose=False,
    )
    runs = []
    for rep in range(reps + 1):  # the first is a warm-up
        llm.reset()
        start = time.perf_counter()
        llm.eval(prompt)
        prompt_seconds = time.perf_counter() - start
        made = 0
        start = time.perf_counter()
        while made < new_tokens:
            token = llm.sample(temp=0.0)
            llm.eval([token])
            made += 1
        if rep:
            runs.append(PeerRun(made, prompt_seconds, time.perf_counter() - start))
    return runs


# -- llama-server -------------------------------------------------------------------------------
def _with_server(server: Path, gguf: Path, prompt, new_tokens: int, threads: int, reps: int):
    context = len(prompt) + new_tokens + 64
    with _server(server, gguf, threads, context) as url:
        body = {
            "prompt": list(prompt),
            "n_predict": new_tokens,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "ignore_eos": True,
            "stream": False,
            "return_tokens": True,
        }
        runs = []
        for rep in range(reps + 1):  # the first is a warm-up
            reply = _post(f"{url}/completion", body)
            timings = reply["timings"]
            if rep:
                runs.append(
                    PeerRun(
                        int(timings["predicted_n"]),
                        float(timings["prompt_ms"]) / 1000,
                        float(timings["predicted_ms"]) / 1000,
                        tuple(int(t) for t in reply.get("tokens") or ()),
                    )
                )
        return runs


@contextlib.contextmanager
def _server(binary: Path, gguf: Path, threads: int, context: int) -> Iterator[str]:
    port = _free_port()
    args = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    args += ["-t", str(threads), "-tb", str(threads), "-c", str(context), "-np", "1"]
    log = tempfile.TemporaryFile()  # the server logs a lot: a pipe would fill and block it
    process = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                log.seek(0)
                tail = log.read().decode(errors="replace").strip()
                raise RuntimeError(f"exited with {process.returncode}: {tail[-100:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"not ready after {START_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _post(url: str, body: dict) -> dict:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as reply:
        return json.loads(reply.read())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
