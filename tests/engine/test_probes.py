"""The local runner's start-up probes (KV geometry, RoPE convention) are measured once
per model and setting and read back after; never reused across another model, dtype or
torch version; a damaged record is measured again."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from loomterm.engine.local import probes
from loomterm.engine.local.runner import LocalRunner
from loomterm.engine.models.load import load_model


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A probe cache of this test's own, empty at the start."""
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def counted(monkeypatch):
    """How many forward passes ``LocalRunner.fresh_kv`` ran."""
    calls = []
    real = LocalRunner.fresh_kv

    def fresh_kv(self, tokens, offset):
        calls.append((len(tokens), offset))
        return real(self, tokens, offset)

    monkeypatch.setattr(LocalRunner, "fresh_kv", fresh_kv)
    return calls


def records():
    from loomterm.config import locations

    return sorted((locations.cache_dir() / "probes").glob("*.json"))


def test_a_second_runner_reads_the_answers_the_first_measured(tiny_llama_dir, counted):
    loaded = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    first = LocalRunner(loaded)
    assert len(counted) == 3  # geometry, and the RoPE probe's two offsets
    assert len(records()) == 1
    second = LocalRunner(load_model(str(tiny_llama_dir), device="cpu", dtype="float32"))
    assert len(counted) == 3  # nothing measured again
    measured = first.fresh_kv([1, 2], 0).shape
    assert (second.work.n_layers, second.work.n_heads, second.work.head_dim) == (
        measured[0],
        measured[2],
        measured[4],
    )
    assert second.rope is not None and second.rope.convention == first.rope.convention
    assert torch.equal(second.rope.inv_freq, first.rope.inv_freq)


def test_no_rope_is_an_answer_too(tiny_gpt2_dir, counted):
    LocalRunner(load_model(str(tiny_gpt2_dir), device="cpu", dtype="float32"))
    measured = len(counted)
    runner = LocalRunner(load_model(str(tiny_gpt2_dir), device="cpu", dtype="float32"))
    assert runner.rope is None and not runner.capabilities.rerope
    assert len(counted) == measured  # read back, not measured


@pytest.mark.parametrize("damage", ["", "{not json", '{"key": 1}', "[]", "null"])
def test_a_damaged_record_is_measured_again_and_rewritten(tiny_llama_dir, counted, damage):
    loaded = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    good = LocalRunner(loaded)
    (record,) = records()
    record.write_text(damage)
    again = LocalRunner(loaded)
    assert len(counted) == 6  # measured twice
    assert again.rope.convention == good.rope.convention
    LocalRunner(loaded)
    assert len(counted) == 6  # the rewritten record is read


def test_a_record_of_other_answers_under_the_same_name_is_not_trusted(tiny_llama_dir, counted):
    import json

    loaded = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    LocalRunner(loaded)
    (record,) = records()
    data = json.loads(record.read_text())
    data["rope"]["candidate"] = 99  # names no candidate convention
    record.write_text(json.dumps(data))
    runner = LocalRunner(loaded)
    assert len(counted) == 6 and runner.rope is not None


def test_the_key_names_model_precision_device_and_versions(tiny_llama_dir, monkeypatch):
    loaded = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    model = loaded.model
    key = probes.probe_key(loaded, model, None)
    assert key is not None
    path = probes.record_path(key)
    others = [
        dataclasses.replace(loaded, dtype=torch.bfloat16),
        dataclasses.replace(loaded, quant="int8"),
        dataclasses.replace(loaded, device=torch.device("meta")),
        dataclasses.replace(loaded, fingerprint={**loaded.fingerprint, "weights": "0" * 64}),
        dataclasses.replace(loaded, fingerprint={**loaded.fingerprint, "config": "1" * 64}),
    ]
    paths = {probes.record_path(probes.probe_key(other, model, None)) for other in others}
    assert path not in paths and len(paths) == len(others)
    assert probes.record_path(probes.probe_key(loaded, model, "own attention")) != path
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert probes.record_path(probes.probe_key(loaded, model, None)) != path


def test_a_model_without_a_full_fingerprint_is_always_measured(tiny_llama_dir, counted):
    loaded = load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    loaded = dataclasses.replace(loaded, fingerprint={"name": "x", "config": "c"})
    LocalRunner(loaded)
    LocalRunner(loaded)
    assert len(counted) == 6 and not records()
