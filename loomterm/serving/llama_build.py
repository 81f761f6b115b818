"""Build llama.cpp once, from source, into loomterm's cache folder: ``llama-server``
and the shared library that the ``llama_cpp`` binding (the llama.cpp runner) loads.

The source comes from the ``llama-cpp-python`` source distribution on the Python package
index (pinned in ``locations.LLAMA_CPP_VERSION``), which carries llama.cpp's whole tree
under ``vendor/llama.cpp``: any machine that installed loomterm can fetch it with pip.
One cmake build serves both:

    cmake -S llama.cpp -B build -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON
          -DCMAKE_INSTALL_RPATH='$ORIGIN:$ORIGIN/../lib' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
    cmake --build build --target llama-server -j JOBS

with ggml's instruction-set options for this CPU (``cpu_target``: explicit on x86-64,
AMX off), about 15 minutes on two cores. ``llama_cpp_dir()``
(``cache_dir()/llama.cpp/<version>/<cpu build name>``)
then holds ``bin/llama-server``, ``lib/`` (libllama, libggml*, libmtmd: the binary finds
them through its rpath) and ``python/``: the binding's pure-Python package, installed
from the same source distribution with ``CMAKE_ARGS=-DLLAMA_BUILD=OFF`` (which compiles
nothing; a few seconds), which loads ``lib/`` through ``LLAMA_CPP_LIB_PATH`` (a folder).
The source and build folders are deleted once both are in place.

A file lock keeps two processes from building at once (the second waits, then finds the
build). Progress is reported as lines (``log``); a machine that cannot build (no cmake,
no C++ compiler) gets a one-line reason.

``LOOMTERM_LLAMA_SERVER`` names a server binary to use instead (one built elsewhere, or
a packaged llama.cpp). Run ``python -m loomterm.serving.llama_build`` to build ahead.
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

from loomterm.config import locations
from loomterm.config.cpu_target import this_cpu_options
from loomterm.errors import LoomError

LLAMA_CPP_PYTHON_VERSION = locations.LLAMA_CPP_VERSION
REQUIREMENT = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
SOURCE_MEMBER = "vendor/llama.cpp"
ENV_BINARY = "LOOMTERM_LLAMA_SERVER"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=ON",  # libllama.so for the binding, beside the server
    # The server finds its libraries in the build tree (bin/) and once installed (../lib).
    "-DCMAKE_INSTALL_RPATH=$ORIGIN:$ORIGIN/../lib",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)  # then the instruction sets of this CPU (cpu_target.this_cpu_options)
LOCK_WAIT_S = 3600.0  # another process's build: wait for it rather than build twice
LIB_SUFFIXES = (".so", ".dylib", ".dll")
LIBRARY_GLOB = "libllama.*" if os.name != "nt" else "llama.dll"
SOURCE_ARCHIVE = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
# Install the binding's Python files only: llama-cpp-python's CMakeLists then adds no
# C++ target (its own copy of the library would be a second 15-minute build).
BINDING_CMAKE_ARGS = "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")

Log = Callable[[str], None]


class BuildError(LoomError):
    """llama.cpp cannot be built or found on this machine (one-line reason)."""


def home() -> Path:
    """Where this version's build (and, while building, its source) lives."""
    return locations.llama_cpp_dir()


def binary_path() -> Path:
    return home() / "bin" / ("llama-server.exe" if os.name == "nt" else "llama-server")


def library_dir() -> Path:
    """The shared libraries' folder (``LLAMA_CPP_LIB_PATH`` for the binding)."""
    return home() / "lib"


def binding_dir() -> Path:
    """The folder to put on ``sys.path`` for the ``llama_cpp`` binding."""
    return home() / "python"


def _library_ready() -> bool:
    return any(library_dir().glob(LIBRARY_GLOB))


def binding_ready() -> bool:
    """Whether the library and the binding are both in the cache (no build needed)."""
    return _library_ready() and (binding_dir() / "llama_cpp" / "llama_cpp.py").is_file()


def find_llama_server() -> Path | None:
    """A usable binary without building: ``$LOOMTERM_LLAMA_SERVER`` or the cached one."""
    named = os.environ.get(ENV_BINARY)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BuildError(f"{ENV_BINARY}={named} is not an executable file")
        return path
    path = binary_path()
    ready = path.is_file() and os.access(path, os.X_OK) and _library_ready()
    return path if ready else None


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
    found = find_llama_server()
    if found is not None:
        return found
    ensure_llama_cpp(log, jobs, binding=False)
    return binary_path()


def ensure_llama_cpp(log: Log | None = None, jobs: int | None = None, binding: bool = True) -> Path:
    """The build (server and library; with ``binding``, the binding too) in the cache,
    built first where it is missing. Returns ``home()``; raises :class:`BuildError`
    with one line."""
    say = log or (lambda _line: None)
    remove_unnamed_build()
    if _complete(binding):
        return home()
    reason = why_cannot_build()
    if reason is not None:
        raise BuildError(f"cannot build llama.cpp: {reason}")
    from filelock import FileLock, Timeout

    home().mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(home()) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say("llama.cpp: another process is building it; waiting")
        try:
            lock.acquire(timeout=LOCK_WAIT_S)
        except Timeout:
            raise BuildError(
                f"cannot build llama.cpp: another build held {lock.lock_file} "
                f"for over {LOCK_WAIT_S / 60:.0f} minutes"
            ) from None
    try:
        if not _complete(binding):  # the other process may have finished it
            _build(say, jobs or os.cpu_count() or 1, binding)
        return home()
    finally:
        lock.release()


def _complete(binding: bool) -> bool:
    path = binary_path()
    server = path.is_file() and os.access(path, os.X_OK) and _library_ready()
    return server and (binding_ready() or not binding)


def _build(say: Log, jobs: int, binding: bool) -> None:
    start = time.monotonic()
    source, build = home() / "source", home() / "build"
    if not (binary_path().is_file() and _library_ready()):
        if not (source / "CMakeLists.txt").is_file():
            _fetch_source(source, say)
        if not (build / "CMakeCache.txt").is_file():
            say("llama.cpp: configuring with cmake")
            _run(
                ["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS, *this_cpu_options()],
                "cmake configure",
            )
        say(f"llama.cpp: compiling with {jobs} job(s) (about 15 minutes on 2 cores)")
        _compile(build, jobs, say, start)
        _install(build)
        shutil.rmtree(build, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
    if binding and not binding_ready():
        _install_binding(say)
    if binding_ready():  # kept until then: the binding installs from it
        (home() / SOURCE_ARCHIVE).unlink(missing_ok=True)
    say(f"llama.cpp: built {home()} in {_minutes(time.monotonic() - start)}")


def remove_unnamed_build() -> None:
    """Delete a build of this version from before builds were named for their CPU
    (``bin/``, ``lib/`` and ``python/`` straight in the version's folder): nothing looks
    there any more, and it may be another CPU's."""
    version = home().parent
    for name in ("bin", "lib", "python"):
        shutil.rmtree(version / name, ignore_errors=True)


def _install(build: Path) -> None:
    """Copy the server and the shared libraries (their version links kept as links) out
    of ``build``; the binary last, since its presence means the build is there."""
    outputs = build / "bin"
    built = next((p for p in outputs.glob("llama-server*") if p.is_file() and _runnable(p)), None)
    libraries = sorted(p for p in outputs.iterdir() if ".so" in p.name or p.suffix in LIB_SUFFIXES)
    if built is None or not any(p.match(LIBRARY_GLOB) for p in libraries):
        raise BuildError(
            f"cannot build llama.cpp: the build made no server or library in {outputs}"
        )
    partial = library_dir().with_name("lib.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for path in libraries:
        shutil.copy2(path, partial / path.name, follow_symlinks=False)
    shutil.rmtree(library_dir(), ignore_errors=True)
    os.replace(partial, library_dir())
    target = binary_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(target.name + ".partial")
    shutil.copy2(built, staged)
    os.replace(staged, target)


def _install_binding(say: Log) -> None:
    """pip-install the binding's Python files from the source archive into
    ``binding_dir()`` (no dependencies: the ``llamacpp`` extra names them)."""
    archive = home() / SOURCE_ARCHIVE
    if not archive.is_file():
        _download(archive, say)
    say("llama.cpp: installing the llama_cpp binding (Python files only)")
    partial = binding_dir().with_name("python.partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input"]
    command += ["--disable-pip-version-check", "--target", str(partial), str(archive)]
    env = {**os.environ, "CMAKE_ARGS": BINDING_CMAKE_ARGS}
    _run(command, "installing the binding", env=env)
    if not (partial / "llama_cpp" / "llama_cpp.py").is_file():
        raise BuildError("cannot build llama.cpp: pip installed no llama_cpp package")
    shutil.rmtree(binding_dir(), ignore_errors=True)
    os.replace(partial, binding_dir())


def _fetch_source(source: Path, say: Log) -> None:
    archive = home() / SOURCE_ARCHIVE
    if not archive.is_file():
        _download(archive, say)
    say("llama.cpp: extracting llama.cpp's source")
    partial = source.with_name(source.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _extract(archive, partial)
    shutil.rmtree(source, ignore_errors=True)
    os.replace(partial, source)


def _download(archive: Path, say: Log) -> None:
    """The source archive, kept at ``archive`` until the binding is installed from it."""
    say(f"llama.cpp: downloading {REQUIREMENT} (source, about 75 MB) with pip")
    with tempfile.TemporaryDirectory(prefix=".download-", dir=home()) as temp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--no-input", "--disable-pip-version-check", "--retries", "2"]
        command += ["--timeout", "30", REQUIREMENT, "-d", temp]
        _run(command, "pip download")
        archives = sorted(Path(temp).glob("*.tar.gz"))
        if not archives:
            raise BuildError(
                f"cannot build llama.cpp: pip saved no source archive of {REQUIREMENT}"
            )
        os.replace(archives[0], archive)


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
                raise BuildError(f"cannot build llama.cpp: {archive.name} has no {SOURCE_MEMBER}")
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(target, members=members, **kwargs)
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"cannot build llama.cpp: {archive.name} is damaged ({exc})") from None


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
        raise BuildError(f"cannot build llama.cpp: cannot run cmake ({exc})") from None
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
                say(f"llama.cpp: compiling {percent}% ({_minutes(now - start)})")
    if process.wait() != 0:
        raise BuildError(f"cannot build llama.cpp: compiling failed ({_first_error(tail)})")


def _run(command: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        result = subprocess.run(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise BuildError(f"cannot build llama.cpp: cannot run {command[0]} ({exc})") from None
    if result.returncode != 0:
        lines = (result.stdout + "\n" + result.stderr).splitlines()
        raise BuildError(f"cannot build llama.cpp: {what} failed ({_first_error(lines)})")


def _first_error(lines: list[str]) -> str:
    errors = [line.strip() for line in lines if "error" in line.lower() and line.strip()]
    text = errors[0] if errors else next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return text[:200] or "no output"


def _runnable(path: Path) -> bool:
    return os.access(path, os.X_OK) and path.suffix in ("", ".exe")


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def main() -> int:
    """``python -m loomterm.serving.llama_build``: build (or find) the server, the library
    and the binding; print the server's path."""

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        ensure_llama_cpp(log)
        print(find_llama_server() or binary_path())
    except LoomError as exc:
        print(f"loomterm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
