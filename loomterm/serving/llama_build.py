"""Build llama.cpp's ``llama-server`` once, from source, into loomterm's cache folder.

The source comes from the ``llama-cpp-python`` source distribution on the Python package
index (pinned below), which carries llama.cpp's whole tree under ``vendor/llama.cpp``:
any machine that installed loomterm can fetch it with pip. The build is

    cmake -S llama.cpp -B build -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF
    cmake --build build --target llama-server -j JOBS

about 15 minutes on two cores. The static binary is kept as
``cache_dir()/llama-server/<version>/bin/llama-server``; the source and build folders
are deleted once it runs. A file lock keeps two processes from building at once (the
second waits, then finds the binary). Progress is reported as lines (``log``); a
machine that cannot build (no cmake, no C++ compiler) gets a one-line reason.

``LOOMTERM_LLAMA_SERVER`` names a binary to use instead (one built elsewhere, or a
packaged llama.cpp). Run ``python -m loomterm.serving.llama_build`` to build ahead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loomterm import locations
from loomterm.errors import LoomError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
REQUIREMENT = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
SOURCE_MEMBER = "vendor/llama.cpp"
ENV_BINARY = "LOOMTERM_LLAMA_SERVER"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one static binary that can live anywhere
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
LOCK_WAIT_S = 3600.0  # another process's build: wait for it rather than build twice
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")

Log = Callable[[str], None]


class BuildError(LoomError):
    """llama-server cannot be built or found on this machine (one-line reason)."""


def home() -> Path:
    """Where this version's binary (and, while building, its source) lives."""
    return locations.cache_dir() / "llama-server" / LLAMA_CPP_PYTHON_VERSION


def binary_path() -> Path:
    return home() / "bin" / ("llama-server.exe" if os.name == "nt" else "llama-server")


def find_llama_server() -> Path | None:
    """A usable binary without building: ``$LOOMTERM_LLAMA_SERVER`` or the cached one."""
    named = os.environ.get(ENV_BINARY)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BuildError(f"{ENV_BINARY}={named} is not an executable file")
        return path
    path = binary_path()
    return path if path.is_file() and os.access(path, os.X_OK) else None


def why_cannot_build() -> str | None:
    """None when the tools a build needs are here, else the one missing, in a line."""
    if shutil.which("cmake") is None:
        return "cmake is not installed (e.g. apt-get install cmake)"
    compilers = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    if not any(name and shutil.which(name) for name in compilers):
        return "no C++ compiler found (install g++ or clang++, or set CXX)"
    return None


def ensure_llama_server(log: Log | None = None, jobs: int | None = None) -> Path:
    """The llama-server binary, built first if it is not in the cache yet.

    Raises :class:`BuildError` with one line when it cannot be found or built.
    """
    say = log or (lambda _line: None)
    found = find_llama_server()
    if found is not None:
        return found
    reason = why_cannot_build()
    if reason is not None:
        raise BuildError(f"cannot build llama-server: {reason}")
    from filelock import FileLock, Timeout

    home().mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(home()) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say("llama-server: another process is building it; waiting")
        try:
            lock.acquire(timeout=LOCK_WAIT_S)
        except Timeout:
            raise BuildError(
                f"cannot build llama-server: another build held {lock.lock_file} "
                f"for over {LOCK_WAIT_S / 60:.0f} minutes"
            ) from None
    try:
        found = find_llama_server()  # the other process may have finished it
        return found if found is not None else _build(say, jobs or os.cpu_count() or 1)
    finally:
        lock.release()


def _build(say: Log, jobs: int) -> Path:
    start = time.monotonic()
    source, build = home() / "source", home() / "build"
    if not (source / "CMakeLists.txt").is_file():
        _fetch_source(source, say)
    if not (build / "CMakeCache.txt").is_file():
        say("llama-server: configuring with cmake")
        _run(
            ["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS],
            "cmake configure",
        )
    say(f"llama-server: compiling with {jobs} job(s) (about 15 minutes on 2 cores)")
    _compile(build, jobs, say, start)
    built = next((p for p in build.rglob("llama-server*") if p.is_file() and _runnable(p)), None)
    if built is None:
        raise BuildError(f"cannot build llama-server: the build made no binary in {build}")
    target = binary_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.copy2(built, partial)
    os.replace(partial, target)
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    say(f"llama-server: built {target} in {_minutes(time.monotonic() - start)}")
    return target


def _fetch_source(source: Path, say: Log) -> None:
    say(f"llama-server: downloading {REQUIREMENT} (source, about 75 MB) with pip")
    with tempfile.TemporaryDirectory(prefix=".download-", dir=home()) as temp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--no-input", "--disable-pip-version-check", "--retries", "2"]
        command += ["--timeout", "30", REQUIREMENT, "-d", temp]
        _run(command, "pip download")
        archives = sorted(Path(temp).glob("*.tar.gz"))
        if not archives:
            raise BuildError(
                f"cannot build llama-server: pip saved no source archive of {REQUIREMENT}"
            )
        say("llama-server: extracting llama.cpp's source")
        partial = source.with_name(source.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        _extract(archives[0], partial)
        shutil.rmtree(source, ignore_errors=True)
        os.replace(partial, source)


def _extract(archive: Path, target: Path) -> None:
    """Extract ``<top>/vendor/llama.cpp/**`` of ``archive`` into ``target``."""
    try:
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                parts = Path(member.name).parts
                rest = parts[1:]
                if rest[:2] != tuple(SOURCE_MEMBER.split("/")) or len(rest) < 3:
                    continue
                if not (member.isfile() or member.isdir()):
                    continue  # links and devices: not needed to build, never trusted
                member.name = str(Path(*rest[2:]))
                members.append(member)
            if not members:
                raise BuildError(
                    f"cannot build llama-server: {archive.name} has no {SOURCE_MEMBER}"
                )
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(target, members=members, **kwargs)
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"cannot build llama-server: {archive.name} is damaged ({exc})") from None


def _compile(build: Path, jobs: int, say: Log, start: float) -> None:
    command = ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise BuildError(f"cannot build llama-server: cannot run cmake ({exc})") from None
    tail: list[str] = []
    shown, said_at = -10, time.monotonic()
    assert process.stdout is not None
    with process.stdout:
        for line in process.stdout:
            tail = [*tail[-30:], line.rstrip()]
            match = _PERCENT.match(line)
            if not match:
                continue
            percent, now = int(match[1]), time.monotonic()
            # A line at each tenth, and at least one a minute through the long files.
            if percent >= shown + 10 or now - said_at >= 60:
                shown, said_at = max(shown, percent // 10 * 10), now
                say(f"llama-server: compiling {percent}% ({_minutes(now - start)})")
    if process.wait() != 0:
        raise BuildError(f"cannot build llama-server: compiling failed ({_first_error(tail)})")


def _run(command: list[str], what: str) -> None:
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise BuildError(f"cannot build llama-server: cannot run {command[0]} ({exc})") from None
    if result.returncode != 0:
        lines = (result.stdout + "\n" + result.stderr).splitlines()
        raise BuildError(f"cannot build llama-server: {what} failed ({_first_error(lines)})")


def _first_error(lines: list[str]) -> str:
    errors = [line.strip() for line in lines if "error" in line.lower() and line.strip()]
    text = errors[0] if errors else next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return text[:200] or "no output"


def _runnable(path: Path) -> bool:
    return os.access(path, os.X_OK) and path.suffix in ("", ".exe")


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def main() -> int:
    """``python -m loomterm.serving.llama_build``: build (or find) it, print its path."""

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        print(ensure_llama_server(log))
    except LoomError as exc:
        print(f"loomterm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
