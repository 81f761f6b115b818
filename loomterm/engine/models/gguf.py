"""Turn a ``.gguf`` file into a plain float32 Hugging Face folder, once, in the cache.

transformers can load a GGUF file directly, but it dequantizes every tensor on each load
(about 20 s for a 135M model on a laptop CPU). So the first load dequantizes and saves
the result as safetensors + config + tokenizer; every later load reads that folder in
well under a second.

A converted folder counts only once its marker file (``loomterm-conversion.json``)
names the GGUF file's SHA-256. The conversion writes into a temporary folder beside the
target and renames it into place at the end, so a crash never leaves a half-converted
model that a later run would load.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

import loomterm.errors
from loomterm.engine.models.conversions import (
    CONVERSION_FORMAT,
    MARKER,
    find_conversion,
    is_converted,
)
from loomterm.errors import ModelLoadError
from loomterm.progress import Progress
from loomterm.sanitize import safe_line

# Partial folders older than this are leftovers of a crash, not a conversion under way.
STALE_PARTIAL_S = 3600

# Conversions patch a module global of transformers for progress (see _count_tensors):
# one at a time per process.
_convert_lock = threading.Lock()
_partials: set[Path] = set()  # temporary folders of the conversions under way here
_children: dict[subprocess.Popen, Path] = {}  # the conversion processes under way: target


def ensure_converted(
    gguf_path: Path, sha256: str, target: Path, progress: Progress, check: bool = False
) -> Path:
    """Return ``target``, converting ``gguf_path`` into it first unless that was done
    (there, or in another folder: :func:`find_conversion`, whose folder is returned).

    The conversion runs in a child process (``conversion_child``), so this process's
    threads (the editor's keys) keep the interpreter meanwhile; its progress comes back
    through ``progress``. ``check``: first refuse, from the GGUF's config alone, a model
    loomterm cannot run (``load.check_model_config``).
    """
    if is_converted(target, sha256):
        return target
    with _convert_lock:
        # Another thread may have converted this file meanwhile, under any name.
        done = target if is_converted(target, sha256) else find_conversion(sha256)
        if done is not None:
            return done
        _convert_in_child(Path(gguf_path), sha256, Path(target), progress, check)
    return target


def _convert_in_child(
    gguf_path: Path, sha256: str, target: Path, progress: Progress, check: bool
) -> None:
    """Run :func:`convert` in ``conversion_child``, its reports handed to ``progress``;
    its error raised here as the same class. Leaving early (an exception, a quit) kills
    the child and removes its partial folder."""
    read, write = os.pipe()
    command = [sys.executable, "-m", "loomterm.engine.models.conversion_child"]
    command += [str(write), str(gguf_path), sha256, str(target)] + (["--check"] if check else [])
    with tempfile.TemporaryFile() as errors:
        try:
            child = subprocess.Popen(
                command,
                pass_fds=(write,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        except OSError as exc:
            os.close(read)
            raise ModelLoadError(f"cannot start the conversion of {gguf_path}: {exc}") from None
        finally:
            os.close(write)
        _children[child] = target
        try:
            outcome = _read_reports(read, progress)
            status = child.wait()
        except BaseException:
            _stop(child, target)
            raise
        finally:
            _children.pop(child, None)
        if outcome != ["done"]:  # a child killed from outside leaves its folder behind
            _stop(child, target)
        errors.seek(0)
        said = errors.read()[-2000:].decode("utf-8", "replace")
    if outcome[:1] == ["error"] and len(outcome) == 3:
        kind = getattr(loomterm.errors, str(outcome[1]), None)
        kind = (
            kind if isinstance(kind, type) and issubclass(kind, ModelLoadError) else ModelLoadError
        )
        raise kind(safe_line(outcome[2]))
    if status != 0 or outcome != ["done"]:
        last = [line for line in said.splitlines() if line.strip()][-1:] or [
            f"exit status {status}"
        ]
        raise ModelLoadError(
            f"cannot convert GGUF file {gguf_path}: the conversion stopped ({safe_line(last[0])[:160]})"
        )


def _read_reports(read: int, progress: Progress) -> list:
    """Hand the child's progress reports to ``progress`` until its pipe closes; returns
    its last other report (``["done"]`` or ``["error", kind, line]``; ``[]``: none)."""
    outcome: list = []
    with os.fdopen(read, "r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            if not isinstance(report, list) or not report:
                continue
            if report[0] == "progress" and len(report) == 4:
                stage, done, total = report[1:]
                progress(str(stage), int(done), None if total is None else int(total))
            else:
                outcome = report
    return outcome


def _stop(child: subprocess.Popen, target: Path) -> None:
    """Kill ``child`` and remove the partial folder it was writing for ``target`` (named
    with its process id)."""
    with contextlib.suppress(OSError):
        child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=10)
    for partial in target.parent.glob(f".{target.name}.{child.pid}-*.partial"):
        shutil.rmtree(partial, ignore_errors=True)


def read_gguf_config(gguf_path: Path, progress: Progress):
    """The transformers config described by a GGUF file's metadata."""
    from transformers import AutoConfig

    return _read_gguf(AutoConfig, gguf_path, progress, "read", "")


def _read_gguf(auto, gguf_path: Path, progress: Progress, stage: str, part: str):
    """``auto.from_pretrained`` on a GGUF file as ``stage`` of ``progress``; a failure is
    one line naming ``part`` ("the tokenizer of ", or "" for the file)."""
    with progress.timed(stage), quiet_warnings():
        try:
            return auto.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        except Exception as exc:
            raise ModelLoadError(
                f"cannot read {part}GGUF file {gguf_path}: {short_reason(exc)}"
            ) from None


def convert(
    gguf_path: Path,
    sha256: str,
    target: Path,
    progress: Progress,
    check_config: Callable[[object], None] | None,
) -> None:
    """Convert ``gguf_path`` into ``target`` in this process (``conversion_child`` runs
    it; :func:`ensure_converted` is the way in). ``check_config(config)`` runs on the
    GGUF's config before any weights are read; it raises to refuse the model."""
    config = read_gguf_config(gguf_path, progress)
    if check_config is not None:
        check_config(config)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(target)
    # Not tempfile.mkdtemp: its private 0700 mode would stick to the finished folder.
    temp = target.parent / f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
    temp.mkdir()
    _partials.add(temp)
    try:
        model = _dequantize(gguf_path, config, progress)
        tokenizer = _gguf_tokenizer(gguf_path, progress)
        with progress.timed("save"):
            _save_weights(model, temp / "model.safetensors")
            _save_config(model, temp)
            tokenizer.save_pretrained(temp)
            marker = {
                "format": CONVERSION_FORMAT,
                "gguf_file": gguf_path.name,
                "gguf_sha256": sha256,
                "transformers": _transformers_version(),
            }
            # The marker is written last: its presence means the folder is complete.
            (temp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _move_into_place(temp, target, sha256)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        _partials.discard(temp)


def children() -> list[subprocess.Popen]:
    """The conversion processes under way (``conversion_child``)."""
    return list(_children)


def remove_partials() -> None:
    """Stop the conversions under way and remove their temporary folders: the process
    is leaving without waiting for them (the editor quit during a first load). A folder
    counts as a conversion only once renamed into place, so none is ever half-used;
    this leaves no leftover either (else removed an hour later by the next one)."""
    for child, target in list(_children.items()):
        _stop(child, target)
    for temp in list(_partials):
        shutil.rmtree(temp, ignore_errors=True)


def _dequantize(gguf_path: Path, config, progress: Progress):
    from transformers import AutoModelForCausalLM

    kwargs = {"gguf_file": gguf_path.name, "config": config, "dtype": torch.float32}
    gguf_config = _dequantizing_gguf_config()
    if gguf_config is not None:
        kwargs["quantization_config"] = gguf_config
    with progress.timed("dequantize") as count, _count_tensors(count), quiet_warnings():
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **kwargs)
        except Exception as exc:
            raise ModelLoadError(
                f"cannot dequantize GGUF file {gguf_path}: {short_reason(exc)}"
            ) from None
    if any(not p.is_floating_point() for p in model.parameters()):
        raise ModelLoadError(f"transformers left GGUF file {gguf_path} partly quantized")
    return model


def _dequantizing_gguf_config():
    """A ``GgufConfig(dequantize=True)`` where transformers has one.

    Newer transformers may keep GGUF weights packed (when the ``kernels`` package is
    installed); the state dict would then hold packed blocks, which we must not save.
    """
    try:
        from transformers import GgufConfig
    except ImportError:
        return None
    try:
        return GgufConfig(dequantize=True)
    except TypeError:
        return None


def _gguf_tokenizer(gguf_path: Path, progress: Progress):
    from transformers import AutoTokenizer

    return _read_gguf(AutoTokenizer, gguf_path, progress, "tokenizer", "the tokenizer of ")


def _save_weights(model, path: Path) -> None:
    """Save the state dict as safetensors, each shared tensor once.

    ``save_pretrained`` refuses a GGUF-loaded model, and safetensors refuses tensors that
    share memory, as tied weights do (SmolLM2's lm_head is its embedding). The first name
    of each shared storage is kept: modules register the embedding before the head, and
    ``from_pretrained`` ties the head back from the config.
    """
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    seen_views: set[tuple[int, int, tuple[int, ...]]] = set()
    seen_storages: set[int] = set()
    for name, tensor in model.state_dict().items():
        if tensor.numel() == 0:  # empty tensors have no storage to share
            tensors[name] = tensor.detach().to("cpu")
            continue
        storage = tensor.untyped_storage().data_ptr()
        view = (storage, tensor.storage_offset(), tuple(tensor.shape))
        if view in seen_views:
            continue  # a tied weight: the same tensor under a second name
        tensor = tensor.detach().to("cpu")
        # Another slice of a storage already saved must be copied out to be saved.
        tensors[name] = tensor.clone() if storage in seen_storages else tensor.contiguous()
        seen_views.add(view)
        seen_storages.add(storage)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _save_config(model, folder: Path) -> None:
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(folder)
    # A config that still names GGUF quantization would send later loads back to the
    # GGUF loader; these weights are plain float32 now.
    config_file = folder / "config.json"
    data = json.loads(config_file.read_text())
    if data.pop("quantization_config", None) is not None:
        config_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)


def _move_into_place(temp: Path, target: Path, sha256: str) -> None:
    if target.exists() and not is_converted(target, sha256):
        shutil.rmtree(target)  # an older format or a damaged folder
    try:
        os.replace(temp, target)
    except OSError:
        if not is_converted(target, sha256):
            raise
        # Another process finished the same conversion first; keep theirs.
        shutil.rmtree(temp, ignore_errors=True)


def _remove_stale_partials(target: Path) -> None:
    now = time.time()
    for partial in target.parent.glob(f".{target.name}.*.partial"):
        with contextlib.suppress(OSError):
            if now - partial.stat().st_mtime > STALE_PARTIAL_S:
                shutil.rmtree(partial, ignore_errors=True)


@contextlib.contextmanager
def _count_tensors(count: Callable[[int, int | None], None]) -> Iterator[None]:
    """Report transformers' per-tensor GGUF dequantization loop through ``count``.

    That loop iterates ``tqdm(reader.tensors)`` with tqdm imported into
    ``transformers.modeling_gguf_pytorch_utils``; swapping that name for a counting
    iterator gives real progress and keeps its bar off the terminal. Where the name is
    gone (another transformers version), nothing is patched and the stage is only timed.
    """
    try:
        module = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:
        yield
        return
    original = getattr(module, "tqdm", None)
    if original is None:
        yield
        return

    def counting(iterable=None, *args, **kwargs):
        if iterable is None:  # some other use of tqdm: keep it, silenced
            return original(*args, disable=True, **kwargs)
        total = len(iterable) if hasattr(iterable, "__len__") else None

        def walk():
            for index, item in enumerate(iterable):
                count(index, total)
                yield item
            if total is not None:
                count(total, total)

        return walk()

    module.tqdm = counting
    try:
        yield
    finally:
        module.tqdm = original


@contextlib.contextmanager
def quiet_warnings() -> Iterator[None]:
    """Silence Python warnings from transformers during a load (not thread-safe, like
    ``warnings.catch_warnings`` itself; loads do not run concurrently)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def short_reason(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message, trimmed, for a one-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _transformers_version() -> str:
    import transformers

    return transformers.__version__
