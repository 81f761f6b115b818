"""What the local runner measures of its model when it is built, kept per model.

A :class:`~loomterm.engine.local.runner.LocalRunner` reads two facts off real forward
passes: the KV geometry (layers, KV heads, head dim: one pass) and the RoPE convention
under which re-rotating a key equals recomputing it (``kv.rope.probe_rope``: two
passes). Together about a second at start-up on a small CPU model, and always the same
answers for the same model, so they are kept in ``cache_dir()/probes/``, one JSON
record per model and setting:

- the key names everything the answers could depend on: the model's fingerprint
  (digests of its config, weights and tokenizer), its class, dtype, quantization,
  device, the attention loomterm installed, the torch and transformers versions, a
  digest of the code that measures (this module, ``kv.rope``, ``kernels.attention``)
  and this record's format. Any of these differing is another record, never a reuse;
- a model without a full fingerprint is always measured;
- a record that is missing, unreadable, damaged or of another key is ignored: the
  model is measured again and the record rewritten. A cache that cannot be written
  only costs the time.

The RoPE answer is kept as the index of the candidate convention that passed
(``rope.candidate_specs``, read off the model as before), so the frequencies are the
model's own; a record whose index does not name a candidate of that convention is
measured again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from loomterm.atomic import write_atomic
from loomterm.config import locations
from loomterm.engine.kv.rope import RopeSpec, candidate_specs, probe_rope

FORMAT = 1
FINGERPRINT_KEYS = ("config", "weights", "tokenizer")


@dataclass(frozen=True)
class Probed:
    """The answers: ``geometry`` (layers, KV heads, head dim) and ``rope`` (None: not
    re-ropeable); ``cached``: read from a record rather than measured."""

    geometry: tuple[int, int, int]
    rope: RopeSpec | None
    cached: bool = False


def probe_key(loaded: Any, model: torch.nn.Module, attention_note: str | None) -> dict | None:
    """What the answers for ``loaded`` (a ``LoadedModel``) depend on; None when its
    fingerprint is not complete (nothing is cached for it)."""
    import transformers

    fingerprint = dict(getattr(loaded, "fingerprint", None) or {})
    if not all(isinstance(fingerprint.get(k), str) and fingerprint[k] for k in FINGERPRINT_KEYS):
        return None
    device = torch.device(loaded.device)
    device_name = device.type
    if device.type == "cuda" and torch.cuda.is_available():
        device_name = f"cuda {torch.cuda.get_device_name(device)}"
    return {
        "format": FORMAT,
        "model": {k: fingerprint[k] for k in FINGERPRINT_KEYS},
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "dtype": str(loaded.dtype),
        "quant": str(getattr(loaded, "quant", "none")),
        "device": device_name,
        "attention": [str(getattr(model.config, "_attn_implementation", "")), attention_note or ""],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "code": code_digest(),
    }


def code_digest() -> str:
    """A digest of the code that decides the answers (this module, the RoPE probe and
    loomterm's attention), so changed code never reads answers the old code gave."""
    from loomterm.engine.kernels import attention
    from loomterm.engine.kv import rope

    digest = hashlib.sha256()
    for module in (rope, attention, sys.modules[__name__]):
        try:
            digest.update(Path(module.__file__ or "").read_bytes())
        except OSError:
            digest.update(module.__name__.encode())
    return digest.hexdigest()


def record_path(key: dict) -> Path:
    """Where the record for ``key`` lives."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    name = hashlib.sha256(text.encode()).hexdigest()[:32]
    return locations.cache_dir() / "probes" / f"{name}.json"


def read_record(key: dict, model: torch.nn.Module) -> Probed | None:
    """The answers recorded for ``key``, or None (no record, or one not to trust)."""
    try:
        data = json.loads(record_path(key).read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        layers, heads, dim = (int(v) for v in data["geometry"])
        if min(layers, heads, dim) <= 0:
            return None
        rope = data["rope"]
        spec = None
        if rope is not None:
            candidates = candidate_specs(model)
            index = int(rope["candidate"])
            if not 0 <= index < len(candidates):
                return None
            spec = candidates[index]
            if spec.convention != rope["convention"]:
                return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return Probed((layers, heads, dim), spec, cached=True)


def write_record(key: dict, probed: Probed, model: torch.nn.Module) -> None:
    """Record ``probed`` for ``key`` (a cache that cannot be written is let be)."""
    rope = None
    if probed.rope is not None:
        candidates = candidate_specs(model)
        index = next(
            (
                i
                for i, spec in enumerate(candidates)
                if spec.convention == probed.rope.convention
                and torch.equal(spec.inv_freq, probed.rope.inv_freq)
            ),
            None,
        )
        if index is None:
            return  # not a candidate's answer: nothing to record it by
        rope = {"convention": probed.rope.convention, "candidate": index}
    data = {"key": key, "geometry": list(probed.geometry), "rope": rope}
    path = record_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, sort_keys=True))
    except OSError:
        pass


def measure(
    model: torch.nn.Module,
    fresh_kv: Callable[[list[int], int], torch.Tensor],
    vocab_size: int,
) -> Probed:
    """The answers from forward passes (``fresh_kv(tokens, offset)``: the runner's)."""
    kv = fresh_kv([0], 0)
    geometry = (int(kv.shape[0]), int(kv.shape[2]), int(kv.shape[4]))
    return Probed(geometry, probe_rope(model, fresh_kv, vocab_size))


def probed(
    loaded: Any,
    model: torch.nn.Module,
    fresh_kv: Callable[[list[int], int], torch.Tensor],
    vocab_size: int,
    attention_note: str | None,
) -> Probed:
    """The answers for ``loaded``'s ``model``: recorded, else measured and recorded."""
    key = probe_key(loaded, model, attention_note)
    if key is not None:
        found = read_record(key, model)
        if found is not None:
            return found
    answers = measure(model, fresh_kv, vocab_size)
    if key is not None:
        write_record(key, answers, model)
    return answers
