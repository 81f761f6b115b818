"""Think-ahead: what ctrl+r costs after a pause, and what typing costs while the editor
thinks ahead, with ``think_ahead`` on against off, in a real ``loomterm`` (tmux).

For each backend (the torch runner, and llama.cpp on the same model's GGUF file where it
is built) and each mode (off, then on), the editor is started in a detached tmux pane
(100x30, one thread) on a saved session holding a short prompt, with ``max_new_tokens``
set. Then, as a writer would:

1. ctrl+g generates a continuation; the run waits until it is on the screen;
2. the writer pauses: with think-ahead on, until the status bar says ``thought ahead``
   (ctrl+r's sibling and ctrl+n's are written); off, as long as on took;
3. **ctrl+r to a full continuation**: from the key to the first screen showing the
   continuation it then keeps (another text, nothing generating, unchanged for half a
   second after; the pane is read every 20 ms);
4. **key latency**: words are typed a key at a time after pauses longer than
   ``think_ahead_pause`` (so with it on, thinking ahead has begun when the first key of
   each word comes, and that key must stop it); per key, from ``send-keys`` to the first
   screen that shows it. The 95th percentile, over every key.

The rows: ctrl+r's seconds, off over on (a speed-up), and key latency p95, on over off
(a cost). Without tmux the section is left out, with a log line.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loomterm.bench.report import Row, ratio
from loomterm.bench.startup import HEIGHT, WIDTH, child_env, document_text

AHEAD = "Think-ahead"
AHEAD_NOTE = (
    "a real `loomterm -s NAME` in tmux (100x30, one thread): ctrl+r after a pause, and "
    "keys typed as thinking ahead begins; baseline: think_ahead off in the same run"
)
PROMPT = (
    "The old weaver kept her loom by the window, where the light came in the morning. "
    "Every thread she wound had a story, and the village came to hear them."
)
POLL_S = 0.02
LIMIT_S = 240.0
PAUSE_S = 1.5  # think_ahead_pause (its default)
STABLE_S = 0.5  # a continuation unchanged this long, with nothing generating, is whole
N_CTX = 2048  # the prompt and a few continuations: a small context, quick to allocate
WORD = "zqxjv"  # letters no model writes together, typed a key at a time


class Pane:
    """One editor in its own tmux server."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.socket = f"loomterm-bench-ahead-{os.getpid()}-{time.monotonic_ns()}"
        names = [k for k in env if k.startswith(("LOOMTERM_", "PYTHON", "OMP_", "HF_", "TERM"))]
        assignments = " ".join(f"{k}={shlex.quote(env[k])}" for k in names)
        line = f"env -u COLUMNS -u LINES {assignments} {shlex.join(command)}"
        size = ["-x", str(WIDTH), "-y", str(HEIGHT)]
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "b", *size, "-c", str(cwd), line)

    def tmux(self, *args: str) -> str:
        import subprocess

        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b")

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", "b", *(["-l"] if literal else []), *keys)

    def status(self, screen: str) -> str:
        lines = [line for line in screen.splitlines() if line.strip()]
        return lines[-2] if len(lines) >= 2 else ""

    def wait(
        self, done: Callable[[str], bool], limit: float = LIMIT_S, poll: float = POLL_S
    ) -> tuple[float, str]:
        """Seconds until a screen satisfies ``done`` (and that screen)."""
        start = time.perf_counter()
        while True:
            screen = self.screen()
            if done(screen):
                return time.perf_counter() - start, screen
            if time.perf_counter() - start > limit:
                raise TimeoutError(f"think-ahead bench: no such screen after {limit:.0f} s")
            time.sleep(poll)

    def close(self) -> None:
        self.tmux("kill-server")


def make_session(folder: Path, name: str, loom, mode: str, new_tokens: int) -> Path:
    """A saved session holding the prompt, with think_ahead ``mode``."""
    from loomterm.sessions.session import close_session, save_loom

    node = loom.append(loom.root, PROMPT)
    loom.cursor = node
    loom.update_settings(think_ahead=mode, max_new_tokens=new_tokens, n=2, temperature=0.8)
    path = folder / f"{name}.loom"
    save_loom(loom, path)
    close_session(loom)
    loom.runner.close()  # llama.cpp's context: its memory goes back before the editor's
    return path


def idle(pane: Pane, screen: str) -> bool:
    status = pane.status(screen).lower()
    return "generating" not in status and "working" not in status and "loading" not in status


def settled(pane: Pane, shown: str) -> float:
    """When the document first showed the text it then kept: another text than
    ``shown``, nothing generating, and no change for ``STABLE_S`` (a streamed
    continuation changes every token, and says ``generating`` meanwhile)."""
    since, last = None, None
    end = time.perf_counter() + LIMIT_S
    while True:
        screen = pane.screen()
        now = time.perf_counter()
        if now > end:
            raise TimeoutError(f"think-ahead bench: ctrl+r showed nothing in {LIMIT_S:.0f} s")
        text = document_text(screen)
        if text == shown or not idle(pane, screen):
            since, last = None, None
        elif text != last:
            since, last = now, text
        elif now - since >= STABLE_S:
            return since
        time.sleep(POLL_S)


def run_mode(pane: Pane, words: int, pause: float | None) -> dict:
    """One editor run (module docstring, steps 1-4); ``pause``: how long to wait before
    ctrl+r (None: until ``thought ahead``). Returns the timings."""
    pane.wait(lambda s: "tok/s" in pane.status(s) and idle(pane, s))
    pane.keys("C-End")  # the caret at the end of the prompt
    before = document_text(pane.screen())
    pane.keys("C-g")
    pane.wait(lambda s: document_text(s) != before and idle(pane, s) and "tok/s" in s)
    if pause is None:
        waited, _ = pane.wait(lambda s: "thought ahead" in pane.status(s))
    else:
        time.sleep(pause)
        waited = pause
    shown = document_text(pane.screen())
    start = time.perf_counter()
    pane.keys("C-r")
    seconds = settled(pane, shown) - start
    latencies = []
    for _ in range(words):
        time.sleep(PAUSE_S + 0.4)  # past the pause: thinking ahead begins (when on)
        typed = ""
        for letter in WORD:
            typed += letter
            sent = time.perf_counter()
            pane.keys(letter, literal=True)
            pane.wait(lambda s, t=typed: t in document_text(s), limit=30, poll=0.002)
            latencies.append(time.perf_counter() - sent)
        pane.keys("Enter")
    return {"regen": seconds, "waited": waited, "latencies": latencies}


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def backend_runs(
    name: str, command: list[str], make_loom, folder: Path, new_tokens: int, words: int, log
) -> dict[str, dict]:
    """Think-ahead on, then off (waiting as long as on waited), on ``command``."""
    runs: dict[str, dict] = {}
    env = child_env(
        {"LOOMTERM_DATA_DIR": str(folder / "data"), "LOOMTERM_CONFIG_DIR": str(folder / "cfg")}
    )
    for mode in ("on", "off"):
        loom = make_loom()
        session = make_session(folder, f"{name}-{mode}", loom, mode, new_tokens)
        pane = Pane([*command, "-s", str(session)], env, folder)
        try:
            pause = None if mode == "on" else runs["on"]["waited"]
            runs[mode] = run_mode(pane, words, pause)
        finally:
            pane.close()
        run = runs[mode]
        log(
            f"think-ahead {name} {mode}: ctrl+r {run['regen']:.2f} s, keys p95 "
            f"{p95(run['latencies']) * 1000:.0f} ms over {len(run['latencies'])}"
        )
    return runs


def rows_for(name: str, runs: dict[str, dict], new_tokens: int) -> list[Row]:
    on, off = runs["on"], runs["off"]
    on_p95, off_p95 = p95(on["latencies"]) * 1000, p95(off["latencies"]) * 1000
    return [
        Row(
            AHEAD,
            f"{name}: ctrl+r to a full {new_tokens}-token continuation after a pause (s)",
            off["regen"],
            on["regen"],
            "s",
            ratio(off["regen"], on["regen"]),
            target=">=5",
            note=f"thinking ahead took {on['waited']:.1f} s of the pause",
            extra={"on": on["regen"], "off": off["regen"], "waited": on["waited"]},
        ),
        Row(
            AHEAD,
            f"{name}: key latency p95 while thinking ahead begins (ms)",
            off_p95,
            on_p95,
            "ms",
            ratio(on_p95, off_p95),
            target="<=1.2",
            note=(
                f"median {statistics.median(on['latencies']) * 1000:.0f} ms on, "
                f"{statistics.median(off['latencies']) * 1000:.0f} ms off"
            ),
            extra={"on": on["latencies"], "off": off["latencies"]},
        ),
    ]


def think_ahead_rows(loaded, words: int, new_tokens: int, log: Callable[[str], None]) -> list[Row]:
    """The rows on the torch runner and (where built) llama.cpp; empty without tmux."""
    import sys

    from loomterm.engine import Loom

    if shutil.which("tmux") is None:
        log("think-ahead: tmux is not installed; the section is left out")
        return []
    base = [sys.executable, "-m", "loomterm"]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="loomterm-bench-ahead-") as temp:
        folder = Path(temp)
        torch_command = [*base, "--model", str(loaded.source), "--backend", "torch"]
        torch_command += ["--n-ctx", str(N_CTX)]
        if loaded.device.type != "cpu":
            torch_command += ["--device", str(loaded.device)]
        runs = backend_runs(
            "torch",
            torch_command,
            lambda: Loom.from_loaded(loaded, n_ctx=N_CTX),
            folder,
            new_tokens,
            words,
            log,
        )
        rows += rows_for("torch", runs, new_tokens)
        gguf, why = _gguf(loaded)
        if gguf is None:
            log(f"think-ahead: llama.cpp left out: {why}")
            return rows
        from loomterm.engine.llamacpp.runner import LlamaCppRunner

        command = [*base, "--model", str(gguf), "--backend", "llama.cpp", "--threads", "1"]
        command += ["--n-ctx", str(N_CTX)]
        runs = backend_runs(
            "llama.cpp",
            command,
            lambda: Loom(LlamaCppRunner(gguf, n_ctx=N_CTX, threads=1)),
            folder,
            new_tokens,
            words,
            log,
        )
        rows += rows_for("llama.cpp", runs, new_tokens)
    return rows


def _gguf(loaded) -> tuple[Path | None, str]:
    from loomterm.bench import peer
    from loomterm.engine.llamacpp import binding

    gguf = peer.gguf_of(loaded)
    if gguf is None:
        return None, "no GGUF file for this model"
    if loaded.device.type != "cpu":
        return None, f"llama.cpp is measured on the CPU, this run is on {loaded.device.type}"
    if not binding.available():
        return None, f"llama.cpp is not built: run `{peer.BUILD_HINT}`"
    return Path(gguf), ""
