"""Key-to-screen latency in a real terminal while the model is busy (issue 32).

Not a test (timings depend on the machine): run it by hand, the model on one thread so
the editor competes for the CPU as on a busy laptop::

    python -m tests.tui.measure_latency --busy [PHASE ...]

The installed ``loomterm`` runs in tmux (120x40); keys are sent with ``send-keys`` at
a person's pace, and each key's time is from the moment it is sent to the first
``capture-pane`` that shows its effect:

- *type*: the typed letter is on the screen;
- *arrows*: the caret (the reversed cell) moved;
- *escape*: the status bar no longer says ``generating`` / ``reading`` (the key is
  answered), or, with nothing to stop, the first change at all (``-`` when there is
  none within 2 s); *stopped*: the engine has stopped too (no ``stopping…``: the step
  or chunk under way ends first);
- *ctrl+q*: the process has exited (its exit status is written).

Phases (each in its own folders; Gemma 3 270M from the test cache):

- ``conversion``: the first load of Gemma's GGUF file on the torch backend, in a fresh,
  empty cache folder (``LOOMTERM_CACHE_DIR``), so it is converted while keys are sent;
- ``prefill``: a few thousand tokens pasted, then generating: the model reads them
  (an edit at the start before each round makes it read them all again);
- ``torch`` / ``llamacpp``: a long generation on the torch runner / the llama.cpp
  runner (``--backend llama.cpp``).

Each phase runs ``--runs`` times (a ctrl+q ends each run: one quit sample per run).
The capture polls every few milliseconds; its own cost (a tmux round trip, a few ms
on an idle machine) is in every figure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

WIDTH, HEIGHT = 120, 40
POLL = 0.002
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
TEXT = (
    "The old lighthouse keeper climbed the stairs every evening, counting the steps "
    "aloud as his father had done, and at the top he wound the clockwork that turned "
    "the great lens. Ships passed far out on the grey water, and none of them knew "
    "his name. "
)
Samples = dict[tuple[str, str], list[float]]


def loomterm() -> str:
    beside = Path(sys.executable).with_name("loomterm")
    return str(beside) if beside.exists() else (shutil.which("loomterm") or "loomterm")


class Term:
    """One tmux server (its own socket) running the editor in one pane."""

    def __init__(self, folder: Path, env: dict[str, str], args: list[str]) -> None:
        self.socket = f"loomterm-busy-{os.getpid()}-{time.monotonic_ns()}"
        self.status = folder / "status"
        self.status.unlink(missing_ok=True)
        assigns = " ".join(f"{k}={v}" for k, v in env.items())
        run = f"env -u COLUMNS -u LINES TERM=xterm-256color {assigns} {loomterm()} "
        run += " ".join(args)
        line = f"sh -c '{run}; echo $? > {self.status}; sleep 600'"
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(WIDTH))
        self.tmux("resize-window", "-t", "t", "-x", str(WIDTH), "-y", str(HEIGHT))
        self.tmux("respawn-pane", "-k", "-t", "t", "-c", str(folder), line)

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        ).stdout

    def screen(self, escapes: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "t")

    def keys(self, *keys: str, literal: bool = False) -> float:
        """Send ``keys``; returns when they were sent (perf_counter)."""
        sent = time.perf_counter()
        self.tmux("send-keys", "-t", "t", *(["-l"] if literal else []), *keys)
        return sent

    def paste(self, text: str, folder: Path) -> None:
        buffer = folder / "paste.txt"
        buffer.write_text(text)
        self.tmux("load-buffer", "-b", "p", str(buffer))
        self.tmux("paste-buffer", "-p", "-d", "-b", "p", "-t", "t")

    def wait(self, predicate, timeout: float, escapes: bool = False) -> str | None:
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            screen = self.screen(escapes)
            if predicate(screen):
                return screen
            time.sleep(0.05)
        return None

    def exited(self) -> bool:
        return self.status.exists() and bool(self.status.read_text().strip())

    def kill(self) -> None:
        socket = self.tmux("display-message", "-p", "#{socket_path}").strip()
        self.tmux("kill-server")
        if socket:
            Path(socket).unlink(missing_ok=True)


def bars(screen: str) -> str:
    return "\n".join(screen.splitlines()[-2:])


def document(screen: str) -> str:
    rows = []
    for line in screen.splitlines()[: HEIGHT - 2]:
        _, bar, right = line.partition("\u2595")
        rows.append(right if bar else line)
    return "\n".join(rows)


def caret(screen_e: str) -> tuple[int, int] | None:
    """The first reversed cell of the document area, from ``capture-pane -e``."""
    for row, line in enumerate(screen_e.splitlines()[: HEIGHT - 2]):
        column = 0
        reverse = False
        pos = 0
        while pos < len(line):
            match = SGR.match(line, pos)
            if match:
                codes = [c for c in re.split("[;:]", match.group(1)) if c != ""] or ["0"]
                for code in codes:
                    if code == "0":
                        reverse = False
                    elif code == "7":
                        reverse = True
                    elif code == "27":
                        reverse = False
                pos = match.end()
                continue
            if reverse and column > 30:  # right of the branch pane
                return row, column
            column += 1
            pos += 1
    return None


def timed(term: Term, send, shown, timeout: float = 10.0, escapes: bool = False) -> float | None:
    """ms from ``send()`` (which returns when it sent) to the first screen where
    ``shown(screen)`` holds; None past ``timeout``."""
    sent = send()
    end = sent + timeout
    while time.perf_counter() < end:
        screen = term.screen(escapes)
        if shown(screen):
            return (time.perf_counter() - sent) * 1000
        time.sleep(POLL)
    return None


def quit_time(term: Term, timeout: float = 180.0) -> float | None:
    sent = term.keys("C-q")
    end = sent + timeout
    while time.perf_counter() < end:
        if term.exited():
            return (time.perf_counter() - sent) * 1000
        time.sleep(POLL)
    return None


def type_key(term: Term, letter: str) -> float | None:
    before = document(term.screen()).count(letter)
    return timed(
        term,
        lambda: term.keys(letter, literal=True),
        lambda s: document(s).count(letter) > before,
    )


def arrow_keys(term: Term, samples: Samples, phase: str, count: int, busy) -> None:
    """``count`` presses of Left/Right/Up/Down, each timed to the caret moving, while
    ``busy(screen)`` holds."""
    order = ["Left", "Up", "Right", "Down"]
    for i in range(count):
        screen = term.screen(escapes=True)
        if not busy(term.screen()):
            return
        where = caret(screen)
        if where is None:
            return
        ms = timed(
            term,
            lambda key=order[i % 4]: term.keys(key),
            lambda s, where=where: caret(s) not in (None, where),
            escapes=True,
        )
        samples[(phase, "arrows")].append(ms if ms is not None else float("inf"))
        time.sleep(0.12)


def escape_key(term: Term, samples: Samples, phase: str, busy) -> None:
    """Escape while ``busy(screen)``: timed to its answer (the status bar no longer
    says the work goes on) and to the work stopped (no ``stopping…`` either)."""
    sent = term.keys("Escape")
    answered = None
    while time.perf_counter() - sent < 180:
        screen = term.screen()
        now = (time.perf_counter() - sent) * 1000
        if answered is None and not busy(screen):
            answered = now
        if answered is not None and "stopping" not in bars(screen):
            samples[(phase, "escape")].append(answered)
            samples[(phase, "stopped")].append(now)
            return
        time.sleep(POLL)
    samples[(phase, "escape")].append(answered if answered is not None else float("inf"))
    samples[(phase, "stopped")].append(float("inf"))


def environment(folder: Path, cache: Path) -> dict[str, str]:
    env = {
        "LOOMTERM_DATA_DIR": str(folder / "data"),
        "LOOMTERM_CONFIG_DIR": str(folder / "config"),
        "LOOMTERM_DOCUMENTS_DIR": str(folder / "documents"),
        "LOOMTERM_CACHE_DIR": str(cache),
    }
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def test_cache() -> Path:
    from loomterm.config import locations

    return Path(os.environ.get("LOOMTERM_CACHE_DIR") or locations.test_cache_dir())


def gemma_gguf() -> Path:
    found = sorted((test_cache() / "downloads").glob("gemma-3-270m*.gguf"))
    if not found:
        raise SystemExit("no Gemma 3 270M GGUF file in the test cache (run its tests once)")
    return found[0]


def generating(screen: str) -> bool:
    return "generating" in bars(screen)


def reading(screen: str) -> bool:
    return "reading" in bars(screen)


def loading(screen: str) -> bool:
    return "model loading" in bars(screen)


def idle(screen: str) -> bool:
    state = bars(screen)
    return "^g" in state and not any(
        w in state for w in ("generating", "working", "edited", "loading", "reading")
    )


def session_text(folder: Path, name: str) -> str:
    """What the session file keeps of the document (the tree's path, or the text typed
    before the model read it)."""
    code = (
        "import sys\nfrom loomterm.sessions.session import read_file, session_path\n"
        "f = read_file(session_path(sys.argv[1]), True)\nd = f.data\n"
        "t = d.typed.text if d.typed is not None else ''\n"
        "print(t or d.path_text(), end='')\nf.close()\n"
    )
    env = {**os.environ, **environment(folder, test_cache())}
    out = subprocess.run(
        [sys.executable, "-c", code, name], capture_output=True, text=True, env=env, timeout=120
    )
    return out.stdout if out.returncode == 0 else f"<unreadable: {out.stderr.strip()[-200:]}>"


# -- phases ---------------------------------------------------------------------------------


def phase_conversion(samples: Samples, run: int, notes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cache = folder / "cache"
        cache.mkdir()
        gguf = folder / "gemma-3-270m.gguf"
        try:
            os.link(gemma_gguf(), gguf)  # the same bytes, under a name of this run
        except OSError:
            shutil.copy(gemma_gguf(), gguf)
        args = ["--model", str(gguf), "--device", "cpu", "--threads", "1", "-s", "conv"]
        term = Term(folder, environment(folder, cache), args)
        try:
            if term.wait(lambda s: loading(s) and "^p" in s, 120) is None:
                notes.append(f"conversion run {run}: the editor never showed loading")
                return
            typed = "Once upon a time"
            term.keys(typed, literal=True)
            term.wait(lambda s: typed in s, 30)
            # Keys through the load; quit in a later stage each run.
            target = ("dequantize", "save")[run % 2]
            started = time.perf_counter()
            stages: list[str] = []
            letters = "ZQXJ"
            i = 0
            while time.perf_counter() - started < 600:
                screen = term.screen()
                if not loading(screen):
                    notes.append(f"conversion run {run}: the load ended before the quit")
                    break
                stage = bars(screen).split("model loading", 1)[1].split("\u2502")[0]
                stages.append(stage.strip("\u2026 ").split(" ")[0])
                if target in stage:
                    break
                arrow_keys(term, samples, "conversion", 4, loading)
                ms = type_key(term, letters[i % 4])
                samples[("conversion", "type")].append(ms if ms is not None else float("inf"))
                typed += letters[i % 4]
                # Escape with nothing to stop: the first change of the screen, if any.
                before = term.screen()
                ms = timed(term, lambda: term.keys("Escape"), lambda s, b=before: s != b, timeout=2)
                if ms is not None:
                    samples[("conversion", "escape")].append(ms)
                i += 1
                time.sleep(0.2)
            stage = bars(term.screen()).split("model loading", 1)[-1].strip()[:40]
            ms = quit_time(term)
            samples[("conversion", "ctrl+q")].append(ms if ms is not None else float("inf"))
            partial = (
                sorted(p.name for p in (cache / "models").glob(".*"))
                if (cache / "models").exists()
                else []
            )
            kept = session_text(folder, "conv")
            notes.append(
                f"conversion run {run}: quit at {stage!r}; stages seen {sorted(set(stages))}; "
                f"{len(stages)} rounds; "
                f"session keeps the typing: {kept.endswith(typed[-8:])}; "
                f"left in the cache: {partial or 'nothing partial'}"
            )
        finally:
            term.kill()


def phase_prefill(samples: Samples, run: int, notes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        args = ["--model", "gemma3-270m", "--device", "cpu", "--threads", "1", "-s", "pre"]
        args += ["--max-new-tokens", "8"]
        term = Term(folder, environment(folder, test_cache()), args)
        try:
            if term.wait(idle, 180) is None:
                notes.append(f"prefill run {run}: the model never loaded")
                return
            term.paste(TEXT * 60, folder)  # about 3,000 tokens
            term.wait(lambda s: "lighthouse" in s, 30)
            for cycle in range(3):
                term.keys("C-Home")
                term.keys("A", literal=True)
                term.keys("C-g")
                if term.wait(reading, 120) is None:
                    notes.append(f"prefill run {run} cycle {cycle}: no 'reading' seen")
                    continue
                term.keys("End")  # the caret off the start, where Left has room
                time.sleep(0.2)
                arrow_keys(term, samples, "prefill", 8, reading)
                if cycle < 2:
                    escape_key(term, samples, "prefill", reading)
                    term.wait(idle, 120)
                else:
                    ms = quit_time(term)
                    samples[("prefill", "ctrl+q")].append(ms if ms is not None else float("inf"))
                    return
        finally:
            term.kill()


def phase_generation(samples: Samples, run: int, notes: list[str], backend: str) -> None:
    phase = backend.replace(".", "")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        args = ["--model", "gemma3-270m", "--device", "cpu", "--threads", "1", "-s", "gen"]
        args += ["--backend", backend, "--max-new-tokens", "4000"]
        term = Term(folder, environment(folder, test_cache()), args)
        try:
            if term.wait(idle, 180) is None:
                notes.append(f"{phase} run {run}: the model never loaded; {bars(term.screen())}")
                return
            term.keys(TEXT, literal=True)
            term.wait(lambda s: idle(s) and "grey water" in s, 60)
            letters = "ZQXJ"
            for cycle in range(5):
                term.keys("C-g")
                if term.wait(lambda s: generating(s) and "tok/s" in s, 60) is None:
                    term.wait(generating, 30)
                time.sleep(1.0)
                term.keys("Home")  # off the end: the caret stays while text streams in
                time.sleep(0.2)
                arrow_keys(term, samples, phase, 8, generating)
                if cycle == 4:
                    ms = quit_time(term)
                    samples[(phase, "ctrl+q")].append(ms if ms is not None else float("inf"))
                    return
                if cycle % 2 == 0:
                    escape_key(term, samples, phase, generating)
                else:
                    ms = type_key(term, letters[cycle])
                    samples[(phase, "type")].append(ms if ms is not None else float("inf"))
                term.wait(idle, 60)
        finally:
            term.kill()


PHASES = {
    "conversion": phase_conversion,
    "prefill": phase_prefill,
    "torch": lambda s, r, n: phase_generation(s, r, n, "torch"),
    "llamacpp": lambda s, r, n: phase_generation(s, r, n, "llama.cpp"),
}


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return f"{statistics.median(ordered):.0f} / {p95:.0f} (n={len(ordered)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phases", nargs="*", default=list(PHASES))
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    samples: Samples = defaultdict(list)
    notes: list[str] = []
    for phase in args.phases:
        for run in range(args.runs):
            PHASES[phase](samples, run, notes)
            print(f"... {phase} run {run} done", file=sys.stderr, flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    keys = ["type", "arrows", "escape", "stopped", "ctrl+q"]
    print(f"{'phase':<12}" + "".join(f"{k + ' p50/p95 ms':>26}" for k in keys))
    for phase in args.phases:
        row = "".join(f"{summary(samples.get((phase, k), [])):>26}" for k in keys)
        print(f"{phase:<12}{row}")
    for note in notes:
        print("note:", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
