"""Where converted GGUF files live in the cache, and which folder holds a finished
conversion of a given file (its marker names the file's SHA-256).

Standard library only: the editor asks this before torch is imported, to tell whether
a GGUF file given at start is the model a session was written with.
"""

from __future__ import annotations

import json
from pathlib import Path

from loomterm.config import locations

MARKER = "loomterm-conversion.json"
# Bump when the layout of converted folders changes: older folders are then redone.
CONVERSION_FORMAT = 1


def converted_dir(gguf_path: Path, sha256: str) -> Path:
    """Where the conversion of a GGUF file lives: ``models/<stem>-<12 hex of its SHA-256>``."""
    return locations.cache_dir() / "models" / f"{Path(gguf_path).stem}-{sha256[:12]}"


def is_converted(folder: Path, sha256: str) -> bool:
    """Whether ``folder`` holds a finished conversion of the GGUF file with this digest."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("format") == CONVERSION_FORMAT and marker.get("gguf_sha256") == sha256


def find_conversion(sha256: str) -> Path | None:
    """A finished conversion of the GGUF file with this digest, wherever it was made: a
    file is converted once, whatever path or name it is attached by (the default
    model's own GGUF file, attached by its path, reuses the default's folder)."""
    try:
        folders = sorted((locations.cache_dir() / "models").iterdir())
    except OSError:
        return None
    return next(
        (f for f in folders if not f.name.startswith(".") and is_converted(f, sha256)), None
    )
