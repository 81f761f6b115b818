"""What a ``--model`` value names, decided without loading anything.

Standard library only (``hub_snapshot_folder`` asks huggingface_hub's cache, which
needs no torch): the command line checks a model value here before it imports torch, so
a typo in a path answers at once. ``engine.models.load_model`` uses the same reading.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from loomterm.errors import ModelLoadError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class ModelSource:
    """A model value read: ``kind`` is "default", "shipped", "folder", "gguf" or "hub";
    ``path`` is the resolved folder or file (folder and gguf), ``hub_id`` the id (hub),
    ``name`` the catalogue's name (shipped: ``models.shipped.CATALOGUE``)."""

    kind: str
    path: Path | None = None
    hub_id: str | None = None
    name: str | None = None


def classify(model: str | os.PathLike | None) -> ModelSource:
    """Read a model value; raise ``ModelLoadError`` (one line) for a path that is not
    there or not a model. Server URLs are not model sources (``remote.is_server_url``)."""
    if model is None:
        return ModelSource("default")
    text = os.fspath(model)
    if not text.strip():
        return ModelSource("default")
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"{text} has no config.json, so it is not a Hugging Face model folder"
            )
        return ModelSource("folder", path=path.resolve())
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{text} is neither a model folder nor a .gguf file")
        return ModelSource("gguf", path=path.resolve())
    if text == DEFAULT_MODEL_NAME:
        return ModelSource("default")
    from loomterm.engine.models.shipped import shipped  # it names this module's default

    known = shipped(text)
    if known is not None:
        return ModelSource("shipped", name=known.name)
    if not isinstance(model, str) or looks_like_path(text):
        raise ModelLoadError(f"no such model folder or file: {text}")
    return ModelSource("hub", hub_id=text)


def looks_like_path(text: str) -> bool:
    """Hub ids are ``name`` or ``owner/name``; anything else path-like is a path."""
    if text.startswith((".", "~", "/")) or text.lower().endswith(".gguf"):
        return True
    if any(sep in text for sep in {os.sep, os.altsep} - {None, "/"}):  # Windows separators
        return True
    return text.count("/") > 1 or (len(text) > 1 and text[1] == ":")  # a Windows drive


def hub_model_name(repo_id: str) -> str:
    """The name a hub model goes by (in its fingerprint and the status bar): the id's
    last part."""
    return repo_id.rsplit("/", 1)[-1]


def hub_snapshot_folder(repo_id: str) -> Path | None:
    """The local Hugging Face cache's folder of ``repo_id`` (its current snapshot), or
    None where the cache has no config for it. Asks nothing of the network."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None
