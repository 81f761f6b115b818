"""What identifies a model: SHA-256 digests of its config, weights and tokenizer files.

A session records the fingerprint of the model it was written with, so reopening it with
other weights or another tokenizer can be caught. Hashing gigabytes of weights takes
seconds, so digests of large files are cached in ``cache_dir()/digests/``, keyed by the
file's path, size and modification time.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from loomterm.atomic import write_atomic
from loomterm.config import locations
from loomterm.progress import Progress

CHUNK = 1 << 20
# Smaller files hash faster than a cache lookup is worth.
CACHE_MIN_BYTES = 16 << 20

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.pt")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def file_sha256(path: Path, progress: Progress | None = None, stage: str = "hash") -> str:
    """Hex SHA-256 of a file's bytes, cached for large files."""
    path = Path(path).resolve()
    stat = path.stat()
    cached = _cached_sha256(path, stat)
    if cached is not None:
        return cached
    record = _digest_record(path) if stat.st_size >= CACHE_MIN_BYTES else None
    if stat.st_size < CACHE_MIN_BYTES:
        progress = None  # too quick to be worth a progress line
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(stage, done, stat.st_size)
    hex_digest = digest.hexdigest()
    if record is not None:
        remember_sha256(path, hex_digest)
    return hex_digest


def known_sha256(path: Path) -> str | None:
    """The file's digest where it takes no reading of a large file: cached from an
    earlier hash, or the file is small; None otherwise (hashing gigabytes takes seconds,
    which the caller would spend with nothing on the screen)."""
    path = Path(path).resolve()
    stat = path.stat()
    if stat.st_size < CACHE_MIN_BYTES:
        return file_sha256(path)
    return _cached_sha256(path, stat)


def _cached_sha256(path: Path, stat) -> str | None:
    """The digest recorded for this path at its size and modification time, if any."""
    if stat.st_size < CACHE_MIN_BYTES:
        return None
    key = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        cached = json.loads(_digest_record(path).read_text())
        if {k: cached.get(k) for k in key} == key:
            return cached["sha256"]
    except (OSError, ValueError, KeyError):
        pass  # a missing or damaged record: hash again
    return None


def remember_sha256(path: Path, hex_digest: str) -> None:
    """Record a digest already known (e.g. computed while writing the file)."""
    path = Path(path).resolve()
    stat = path.stat()
    if stat.st_size < CACHE_MIN_BYTES:
        return
    record = _digest_record(path)
    entry = {
        "path": str(path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": hex_digest,
    }
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps(entry))
    except OSError:
        pass  # a read-only cache only costs speed


def _digest_record(path: Path) -> Path:
    name = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    return locations.cache_dir() / "digests" / f"{name}.json"


def combined_sha256(
    files: list[Path], progress: Progress | None = None, stage: str = "hash"
) -> str:
    """One file: its own digest (comparable with ``sha256sum``). Several: a digest of their
    digests in the order given. None: the digest of nothing."""
    digests = [file_sha256(f, progress, stage) for f in files]
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def config_sha256(config_file: Path) -> str:
    """Digest of config.json as canonical JSON, so key order and spacing do not matter."""
    data = json.loads(Path(config_file).read_text(encoding="utf-8"))
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a Hugging Face folder: safetensors if any, else PyTorch pickles."""
    for pattern in WEIGHT_PATTERNS:
        found = sorted(Path(folder).glob(pattern))
        if found:
            return found
    return []


def tokenizer_files(folder: Path) -> list[Path]:
    """tokenizer.json says it all when present; otherwise the vocabulary files."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        return [folder / "tokenizer.json"]
    return [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]


def folder_fingerprint(name: str, folder: Path, progress: Progress | None = None) -> dict:
    """``{"name", "config", "weights", "tokenizer"}`` for a local Hugging Face folder."""
    folder = Path(folder)
    return {
        "name": name,
        "config": config_sha256(folder / "config.json"),
        "weights": combined_sha256(weight_files(folder), progress, "fingerprint"),
        "tokenizer": combined_sha256(tokenizer_files(folder), progress, "fingerprint"),
    }
