"""The bench's busy-CPU rows: the same decode quiet and beside a process spinning on a
core (started and stopped by the bench), for the default threads and a thread per
core, on torch (llama.cpp's rows need its build and a GGUF file: tests/llamacpp/)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import torch

from loomterm.bench.contended import SPIN, busy_core, contended_rows
from loomterm.engine.models.load import load_model
from loomterm.engine.threads import default_threads, physical_cores


def test_busy_rows_on_torch(tiny_llama_dir):
    loaded = load_model(str(tiny_llama_dir), device="cpu")
    before = torch.get_num_threads()
    rows = contended_rows(loaded, list(range(5, 25)), 8, 1, lambda _line: None)
    assert torch.get_num_threads() == before  # given back
    default = rows[0]
    assert default.section == "Busy CPU" and default.target == ">=0.5"
    assert default.name == f"torch, {default_threads('llama.cpp')} thread" + (
        "s (default)" if default_threads("llama.cpp") > 1 else " (default)"
    )
    assert default.baseline > 0 and default.loomterm > 0
    assert default.ratio == default.loomterm / default.baseline
    assert len(rows) == (2 if physical_cores() > 1 else 1)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_spinner_stops_with_the_bench():
    """Stopped on leaving; and a spinner whose bench was killed stops by itself."""
    with busy_core():
        pass
    bench = (
        "import os, subprocess, sys, time\n"
        f"spinner = subprocess.Popen([sys.executable, '-c', {SPIN!r}.format(parent=os.getpid())])\n"
        "print(spinner.pid, flush=True)\n"
        "time.sleep(2)\n"
        "os._exit(0)\n"  # killed, as it were: nothing stops the spinner
    )
    middle = subprocess.Popen([sys.executable, "-c", bench], stdout=subprocess.PIPE, text=True)
    pid = int(middle.stdout.readline())
    try:
        assert running(pid)  # spinning while its bench lives
        middle.wait(timeout=60)
        deadline = time.monotonic() + 30
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not running(pid)
    finally:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
        middle.stdout.close()
