"""Start and stop a local ``llama-server`` (the tests' fixture, the bench, users).

``LlamaServer(binary, model).start()`` runs it on 127.0.0.1 on a free port, waits for
``/health`` to answer 200 and returns; ``stop()`` ends it (``kill()`` ends it at once,
as a crash would). Its output goes to a log file, whose tail is in the error when it
fails to start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from loomterm.errors import LoomError

START_TIMEOUT_S = 120.0


class ServerStartError(LoomError):
    """llama-server did not come up (one line, with the end of its log)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServer:
    """One llama-server process. See the module docstring.

    Attributes:
        url: ``http://127.0.0.1:PORT`` once started.
        process: The running process, or None.
    """

    def __init__(
        self,
        binary: Path,
        model: Path,
        n_ctx: int = 2048,
        slots: int = 4,
        threads: int | None = None,
        port: int | None = None,
        extra: tuple[str, ...] = (),
        log_path: Path | None = None,
    ) -> None:
        self.binary, self.model = Path(binary), Path(model)
        self.n_ctx, self.slots, self.threads = n_ctx, slots, threads
        self.port = port
        self.extra = extra
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.url = ""

    def command(self) -> list[str]:
        threads = self.threads or max(1, min(4, os.cpu_count() or 1))
        return [
            str(self.binary),
            "--model", str(self.model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--ctx-size", str(self.n_ctx * self.slots),  # llama-server splits it over slots
            "--parallel", str(self.slots),
            "--threads", str(threads),
            "--threads-http", str(self.slots + 2),
            "--no-webui",
            *self.extra,
        ]  # fmt: skip

    def start(self, timeout: float = START_TIMEOUT_S) -> LlamaServer:
        if self.port is None:
            self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        with open(self.log_path, "ab") as log:
            try:
                self.process = subprocess.Popen(
                    self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            except OSError as exc:
                raise ServerStartError(f"cannot run {self.binary}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"llama-server exited with status {self.process.returncode} at start: "
                    f"{self.log_tail()}"
                )
            if self.healthy():
                return self
            time.sleep(0.2)
        self.kill()
        raise ServerStartError(
            f"llama-server did not become healthy within {timeout:.0f} s: {self.log_tail()}"
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace") if self.log_path else ""
        except OSError:
            return "(no log)"
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(tail) or "(empty log)"

    def stop(self, timeout: float = 10.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """End it at once (SIGKILL), as a crash would."""
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def __enter__(self) -> LlamaServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
