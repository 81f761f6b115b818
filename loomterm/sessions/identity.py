"""Which model a session belongs to: the record a session file keeps, and comparing it.

A model is identified by its fingerprint (SHA-256 of its config, weights and
tokenizer), so a session is never silently reopened on other weights. Before a model is
loaded, :func:`same_as_recorded` tells from the files alone, where it can, whether a
model value names a session's model (the editor opens the session on it at once).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm.store import ModelMismatchError

if TYPE_CHECKING:
    from loomterm.config.settings import EngineOptions
    from loomterm.engine import Loom
    from loomterm.engine.models.load import LoadedModel

FINGERPRINT_KEYS = ("config", "weights", "tokenizer")


def model_record(loaded: LoadedModel | Loom) -> dict[str, Any]:
    """What a session file keeps about its model: name, source, fingerprint, dtype."""
    runner = getattr(loaded, "runner", None)
    return runner.identity() if runner is not None else loaded.identity()


def same_model(stored: dict[str, Any] | None, given: dict[str, Any] | None) -> bool:
    """True when two fingerprints name the same config, weights and tokenizer."""
    stored, given = stored or {}, given or {}
    return all(
        stored.get(key) is not None and stored.get(key) == given.get(key)
        for key in FINGERPRINT_KEYS
    )


def _short(fingerprint: dict[str, Any], key: str) -> str:
    value = str(fingerprint.get(key) or "?")
    return value[:10]


def mismatch_error(name: str, stored: dict[str, Any], loaded: LoadedModel) -> ModelMismatchError:
    """A clear, one-line refusal naming both models and the two ways forward."""
    old = stored.get("fingerprint") or {}
    new = loaded.fingerprint
    differs = [key for key in FINGERPRINT_KEYS if old.get(key) != new.get(key)]
    return ModelMismatchError(
        f"session {name!r} was made with {stored.get('name') or '?'} but this is "
        f"{loaded.name} ({', '.join(differs)} differ: "
        + ", ".join(f"{k} {_short(old, k)} vs {_short(new, k)}" for k in differs)
        + "); its token ids would be wrong here. Open it read-only, or re-tokenize its "
        "text with the new model (--read-only / --retokenize)",
        stored=old,
        given=dict(new),
    )


def same_as_recorded(record: dict[str, Any], options: EngineOptions) -> bool | None:
    """Whether ``options.model`` is the model of a session's ``record``, decided
    without torch, as ``Session.open`` would compare the loaded model's fingerprint:
    a model folder's own fingerprint (a hub id's: its folder in the local Hugging Face
    cache); a GGUF file's digest (on llama.cpp, the weights' digest is the file's) or the
    fingerprint of its conversion, where those are cached. None when that needs the
    model (a server, a hub id not all in the cache, a GGUF file not hashed or converted
    yet: loading does that with its progress shown)."""
    from loomterm.engine.models.fingerprint import folder_fingerprint
    from loomterm.engine.remote import is_server_url

    if options.model is None or is_server_url(options.model):
        return None
    source = _local_source(options.model)
    if source is None:
        return None
    recorded = record.get("fingerprint") or {}
    backend = _backend_for(source, record, options.backend)
    try:
        if source.kind == "hub":
            return _same_hub_model(source.hub_id, recorded, backend)
        if backend == "llama.cpp":
            return _same_gguf_file(source, record, recorded)
        if source.kind == "gguf":
            folder = _conversion_of(source.path)
            if folder is None:
                return None  # the first load converts it: the model decides then
            return same_model(recorded, folder_fingerprint(source.path.stem, folder))
        return same_model(recorded, folder_fingerprint(source.path.name, source.path))
    except (OSError, ValueError):
        return None  # loading says what is wrong with the folder or file


def _backend_for(source, record: dict[str, Any], backend: str) -> str:
    """The backend ``engine.open.choose_backend`` will pick for ``source`` when the
    session of ``record`` is opened on it: ``auto`` keeps the recorded one for the
    session's own file (``session.Session.open``)."""
    from loomterm.engine.open import choose_backend

    own = source.path is not None and str(source.path) == str(record.get("source"))
    recorded = str(record.get("backend") or "torch") if own else None
    model = str(source.path) if source.path is not None else source.hub_id
    return choose_backend(model, backend, recorded)


def _local_source(model: str):
    """The model value as a local folder, GGUF file or hub id; None for the default
    model's name or a value that loading will refuse with its reason."""
    from loomterm.engine.models.source import classify
    from loomterm.errors import ModelLoadError

    try:
        source = classify(model)
    except ModelLoadError:
        return None
    return source if source.kind in ("folder", "gguf", "hub") else None


def _same_hub_model(repo_id: str, recorded: dict[str, Any], backend: str) -> bool | None:
    """A hub id's fingerprint, as loading takes it: its folder in the local cache, when
    the weights are all there (else loading downloads them first, and decides)."""
    from loomterm.engine.models.fingerprint import folder_fingerprint, weight_files
    from loomterm.engine.models.source import hub_model_name, hub_snapshot_folder

    if backend == "llama.cpp":
        return None  # llama.cpp runs a GGUF file: loading refuses the id with its reason
    folder = hub_snapshot_folder(repo_id)
    if folder is None or not _all_shards(folder, weight_files(folder)):
        return None
    return same_model(recorded, folder_fingerprint(hub_model_name(repo_id), folder))


def _all_shards(folder: Path, weights: list[Path]) -> bool:
    """Whether ``weights`` are there and hold every shard a sharded folder's index names."""
    if not weights:
        return False
    for index in folder.glob("*.index.json"):
        names = set(json.loads(index.read_text()).get("weight_map", {}).values())
        if any(not (folder / name).is_file() for name in names):
            return False
    return True


def _same_gguf_file(source, record: dict[str, Any], recorded: dict[str, Any]) -> bool | None:
    """On llama.cpp the fingerprint's weights are the GGUF file's digest, and its config
    and tokenizer digests follow from the file: the same file is the same model."""
    from loomterm.engine.models.fingerprint import known_sha256

    digest = known_sha256(source.path) if source.kind == "gguf" else None
    if digest is None:
        return None  # llama.cpp refuses what is no GGUF file; a new file is hashed then
    if recorded.get("weights") != digest:
        return False
    return True if record.get("backend") == "llama.cpp" else None


def _conversion_of(gguf: Path) -> Path | None:
    """The cached conversion of a GGUF file, if it was converted (and so hashed) before."""
    from loomterm.engine.models.conversions import find_conversion
    from loomterm.engine.models.fingerprint import known_sha256

    digest = known_sha256(gguf)
    return find_conversion(digest) if digest is not None else None
