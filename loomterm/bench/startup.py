"""Start-up: how soon a real ``loomterm -s NAME`` paints, takes typing and has its model.

The editor is started as a user starts it: the ``loomterm`` command in a real terminal
(a detached tmux pane of 100x30, its own tmux server), on a saved session of about 600
tokens, with the model's cache warm (a first launch, not timed, warms it and the OS's
file cache). A marker word is typed the moment the pane starts, before anything is on
the screen. The pane is read every 20 ms (``capture-pane``); three moments are timed
from the launch:

- **first paint**: the editor's footer (``^p palette``) is on the screen;
- **typing accepted**: the marker word is in the document (a word typed before the
  editor reads the keyboard can be lost: it is typed again every 250 ms once the editor
  is on the screen, and the words lost are counted);
- **model ready**: the status bar names the model and says nothing is loading.

The baseline is ``python -c "import torch, transformers"`` in the same run: the least
any start that needs the model could take. Ratios are loomterm's time over it (a cost:
below 1 means the editor was there before torch could even have been imported).

Without tmux the section is left out, with a log line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loomterm.bench.report import Row, ratio
from loomterm.bench.timing import median

STARTUP = "Start-up"
STARTUP_NOTE = (
    "a real `loomterm -s NAME` in tmux (100x30, warm cache, a ~600-token session); "
    "baseline: `python -c 'import torch, transformers'` in the same run"
)
MARKER = "zqxjv"  # a word no model writes, typed at launch
POLL_S = 0.02
LIMIT_S = 180.0
RETYPE_S = 0.25
WIDTH, HEIGHT = 100, 30


@dataclass
class Launch:
    """The seconds from the launch to each moment (None: not seen before the limit)."""

    paint: float | None = None
    typing: float | None = None
    ready: float | None = None
    lost: int = 0  # marker words typed that never showed (typed before the editor read keys)


def import_baseline() -> float:
    """Seconds a fresh interpreter takes to import torch and transformers."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import torch, transformers"],
        check=True,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a measured process: this one's, one thread, and ``extra``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TERM="xterm-256color")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    env.update(extra or {})
    return env


def _tmux(socket: str, *args: str) -> str:
    result = subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30
    )
    return result.stdout


def document_text(screen: str) -> str:
    """The document pane's text: right of the branch pane (which shows node text too)."""
    return "\n".join(line.partition("\u2595")[2] for line in screen.splitlines())


def status_ready(screen: str, model: str) -> bool:
    """Whether the status bar (the line above the footer) names ``model`` and no
    loading is under way."""
    lines = [line for line in screen.splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    status = lines[-2]
    return model in status and "tok/s" in status and "loading" not in status.lower()


def launch(
    command: list[str], env: dict[str, str], model: str, cwd: Path, type_marker: bool = True
) -> Launch:
    """Start ``command`` in a fresh tmux pane, type the marker at once, and time the
    three moments; the pane's server is killed afterwards."""
    socket = f"loomterm-bench-{os.getpid()}-{time.monotonic_ns()}"
    # tmux passes the client's environment to a new server's panes only in part: name
    # every variable on the command line.
    names = [k for k in env if k.startswith(("LOOMTERM_", "PYTHON", "OMP_", "HF_", "TERM"))]
    assignments = " ".join(f"{k}={_quote(env[k])}" for k in names)
    line = f"env -u COLUMNS -u LINES {assignments} {' '.join(_quote(c) for c in command)}"
    size = ["-x", str(WIDTH), "-y", str(HEIGHT)]
    result = Launch()
    start = time.perf_counter()
    _tmux(socket, "-f", "/dev/null", "new-session", "-d", "-s", "b", *size, "-c", str(cwd), line)
    sent, last_sent = 0, 0.0
    try:
        if type_marker:
            _tmux(socket, "send-keys", "-t", "b", "-l", MARKER + " ")
            sent = 1
        while time.perf_counter() - start < LIMIT_S:
            screen = _tmux(socket, "capture-pane", "-p", "-t", "b")
            now = time.perf_counter() - start
            if result.paint is None and "^p" in screen and "palette" in screen:
                result.paint = now
            if result.typing is None and result.paint is not None and MARKER in screen:
                result.typing = now
            if result.ready is None and result.paint is not None and status_ready(screen, model):
                result.ready = now
            if result.paint and result.ready and (result.typing or not type_marker):
                break
            # A word typed before the editor read the keyboard may be lost: type it
            # again every RETYPE_S once the editor is on the screen, until it shows.
            retype = type_marker and result.typing is None and result.paint is not None
            if retype and now - last_sent >= RETYPE_S:
                _tmux(socket, "send-keys", "-t", "b", "-l", MARKER + " ")
                sent, last_sent = sent + 1, now
            time.sleep(POLL_S)
        if type_marker and result.typing is not None:
            time.sleep(0.5)  # the last word typed reaches the screen
            screen = _tmux(socket, "capture-pane", "-p", "-t", "b")
            result.lost = sent - document_text(screen).count(MARKER)
    finally:
        _tmux(socket, "kill-server")
    return result


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def make_session(loaded, corpus: list[int], folder: Path, tokens: int = 600) -> Path:
    """A saved session of ``tokens`` corpus tokens in two branches, on ``loaded``."""
    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, save_loom
    from loomterm.tree import Origin

    loom = Loom.from_loaded(loaded)
    half = tokens // 2
    first = loom.tree.add(loom.root, corpus[:half], Origin.USER)
    loom.tree.add(first, corpus[half:tokens], Origin.USER)
    loom.tree.add(first, corpus[tokens : tokens + half], Origin.USER)
    loom.cursor = first.children[0]
    path = folder / "startup.loom"
    save_loom(loom, path)
    close_session(loom)
    return path


def startup_rows(
    loaded,
    corpus: list[int],
    reps: int,
    log: Callable[[str], None],
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> list[Row]:
    """The three start-up rows (empty without tmux). ``command`` and ``env`` override
    what is launched (default: this interpreter's ``-m loomterm``, this environment)."""
    if shutil.which("tmux") is None:
        log("start-up: tmux is not installed; the section is left out")
        return []
    base = command or [sys.executable, "-m", "loomterm"]
    launches, baselines = _launches(loaded, corpus, reps, log, base, env)
    base = median(baselines)
    rows = []
    for name, attribute, target in (
        ("first paint", "paint", "<=0.5"),
        ("typing accepted", "typing", "<=0.5"),
        ("model ready", "ready", "<=2"),
    ):
        seen = [getattr(one, attribute) for one in launches]
        value = median([s for s in seen if s is not None]) if all(seen) else float("nan")
        rows.append(
            Row(
                STARTUP,
                f"{name} (s, vs import torch+transformers)",
                base,
                value,
                "s",
                ratio(value, base),
                target=target,
                extra={"runs": seen, "imports": baselines, "lost": [one.lost for one in launches]},
            )
        )
    return rows


def _launches(loaded, corpus: list[int], reps: int, log, base: list[str], env) -> tuple:
    """``reps`` timed launches of the editor (the command line ``base``) on copies of
    one session, after one warm-up, and as many timed imports of torch and
    transformers (the baseline): (launches, baselines)."""
    with tempfile.TemporaryDirectory(prefix="loomterm-bench-start-") as temp:
        folder = Path(temp)
        path = make_session(loaded, corpus, folder)
        extra = {"LOOMTERM_DATA_DIR": str(folder / "data"), **(env or {})}
        extra["LOOMTERM_CONFIG_DIR"] = str(folder / "config")

        def arguments(session: Path) -> list[str]:
            args = [*base, "--model", str(loaded.source), "-s", str(session)]
            if loaded.device.type != "cpu":
                args += ["--device", str(loaded.device)]
            return args

        launches, baselines = [], []
        launch(arguments(path), child_env(extra), loaded.name, folder, type_marker=False)  # warm-up
        for rep in range(reps):
            # Each timed launch opens its own copy of the session: in one the last
            # launch saved, its marker word would already be in the document.
            session = folder / f"startup-{rep + 1}.loom"
            shutil.copyfile(path, session)
            baselines.append(import_baseline())
            launches.append(launch(arguments(session), child_env(extra), loaded.name, folder))
            last = launches[-1]
            log(
                f"start-up {rep + 1}/{reps}: import {baselines[-1]:.2f} s, paint {last.paint}, "
                f"typing {last.typing} ({last.lost} lost), ready {last.ready}"
            )
    return launches, baselines
