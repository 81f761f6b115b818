"""Start-up: what answers before torch is imported (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from loomterm.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def run_probe(*argv: str) -> tuple[dict, str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--model", "./no-such-model", "-s", "x"],
            "no such model folder or file: ./no-such-model",
        ),
        (
            ["--prompt", "Hi", "--model", "/nope/m.gguf"],
            "no such model folder or file: /nope/m.gguf",
        ),
        (["generate", "-s", "x", "--model", "~/nope"], "no such model folder or file: ~/nope"),
        (
            ["--attach", "./missing-folder", "-s", "x"],
            "no such model folder or file: ./missing-folder",
        ),
    ],
)
def test_a_bad_model_value_fails_before_torch_is_imported(argv, message, tmp_path):
    outcome, err = run_probe(*argv)
    assert outcome == {"code": 1, "heavy": []}
    assert err.strip() == f"loomterm: {message}"


def test_a_file_that_is_no_model_fails_before_torch_is_imported(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    outcome, err = run_probe("--model", str(text), "-s", "x")
    assert outcome == {"code": 1, "heavy": []}
    assert err.strip() == f"loomterm: {text} is neither a model folder nor a .gguf file"


def test_a_session_preview_needs_no_torch(tiny_llama_dir, tmp_path):
    """The editor paints from this: the session file's tree and text, read without the
    model (``loomterm.sessions.opening``)."""
    from loomterm.engine import Loom
    from loomterm.sessions.session import close_session, save_loom

    loom = Loom.load(str(tiny_llama_dir), device="cpu")
    name = loom.runner.name
    node = loom.append(loom.root, "Once upon a time")
    loom.cursor = node
    path = tmp_path / "s.loom"
    save_loom(loom, path)
    close_session(loom)
    script = f"""
import json, sys
from loomterm.sessions.session import read_file
from loomterm.sessions.opening import SessionOpening
from loomterm.config.settings import EngineOptions
opening = SessionOpening({str(path)!r}, EngineOptions(), read_file({str(path)!r}))
preview = opening.preview()
text = preview.text(preview.cursor)
opening.close()
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({{"text": text, "heavy": heavy, "model": preview.runner.name}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == {
        "text": "Once upon a time",
        "heavy": [],
        "model": name,
    }


@pytest.mark.parametrize(
    "command", [["--prompt", "Once"], ["generate", "-s", "g", "--prompt", "Once"]]
)
def test_the_import_of_torch_is_the_first_stage_of_the_progress(command, tiny_llama_dir):
    """``--prompt`` and ``generate`` say what they are doing from the start: importing
    torch and transformers (seconds) is a stage on stderr before the model's load."""
    argv = [*command, "--model", str(tiny_llama_dir), "--device", "cpu", "--max-new-tokens", "2"]
    result = subprocess.run(
        [sys.executable, "-m", "loomterm", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    stages = [line.split()[0] for line in result.stderr.splitlines() if " done in " in line]
    assert stages[:1] == ["import"], result.stderr
    assert "load" in stages[1:], result.stderr
    assert result.stdout.startswith("Once")


def test_a_new_sessions_status_bar_shows_the_samplers_it_will_start_with(tiny_llama_dir, tmp_path):
    """Before the model is there, a new session's preview shows the llama.cpp preset and
    the model folder's generation_config, as the loaded session then has them (neutral
    samplers used to show while loading, then change)."""
    import shutil

    from loomterm.config.settings import EngineOptions
    from loomterm.sessions.defaults import start_new_session
    from loomterm.sessions.opening import SessionOpening

    model = tmp_path / "model"
    shutil.copytree(tiny_llama_dir, model)
    config = model / "generation_config.json"
    values = json.loads(config.read_text()) if config.exists() else {}
    config.write_text(json.dumps({**values, "temperature": 0.6, "top_p": 0.9}))
    options = EngineOptions(model=str(model), device="cpu")
    opening = SessionOpening(tmp_path / "new.loom", options, prepare=start_new_session)
    shown = opening.preview().settings
    loom = opening.finish()
    try:
        assert (shown.temperature, shown.top_p) == (0.6, 0.9)
        assert shown == loom.settings
    finally:
        opening.close()


@pytest.mark.parametrize("command", [["--prompt", "Hi"], ["generate", "-s", "g"]])
def test_a_server_that_is_not_running_is_said_before_torch_is_imported(command, tmp_path):
    """``--model URL`` with nothing listening: the one line connecting gives, at once
    (it used to come after seconds of importing torch, behind an ``import`` line)."""
    from loomterm.serving.llama_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    outcome, err = run_probe(*command, "--model", url)
    assert outcome == {"code": 1, "heavy": []}
    assert (
        err == f"loomterm: cannot reach the server at {url} (connection refused): is it running?\n"
    )


@pytest.mark.default_model
def test_whether_a_gguf_file_is_a_sessions_model_is_told_without_torch(tiny_llama_dir, tmp_path):
    """``loomterm --model FILE.gguf`` with no -s: whether the most recent session was
    written on that file is told from the file's digest and its cached conversion, in
    a fresh interpreter without torch, so the editor paints that session at once; it
    answers what loading would (another model: a new session), and None only where
    that needs the model (``sessions.identity.same_as_recorded``)."""
    from loomterm.engine import Loom
    from loomterm.engine.models.default import default_gguf_path
    from loomterm.sessions.session import close_session, save_loom

    gguf = default_gguf_path()
    records = {}
    for name, model in (("gguf", gguf), ("other", tiny_llama_dir)):
        # The GGUF on torch: the default's conversion (auto would take llama.cpp when built).
        loom = Loom.load(str(model), device="cpu", backend="torch")
        loom.cursor = loom.append(loom.root, "Once upon a time")
        records[name] = tmp_path / f"{name}.loom"
        save_loom(loom, records[name])
        close_session(loom)
    paths = {name: str(path) for name, path in records.items()}
    script = f"""
import json, sys
from loomterm.sessions.session import read_file
from loomterm.sessions.identity import same_as_recorded
from loomterm.config.settings import EngineOptions
answers = {{}}
for name, path in {paths!r}.items():
    record = read_file(path, True)
    for backend in ("auto", "llama.cpp"):
        options = EngineOptions(model={str(gguf)!r}, backend=backend)
        answers[name + " " + backend] = same_as_recorded(record.data.model, options)
    record.close()
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({{"answers": answers, "heavy": heavy}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == {
        "answers": {
            "gguf auto": True,  # the torch runner's fingerprint: the conversion's folder
            "gguf llama.cpp": False,  # llama.cpp's weights are the file's digest
            "other auto": False,
            "other llama.cpp": False,
        },
        "heavy": [],
    }


HUB_SESSIONS = """
import sys
from loomterm.engine import Loom
from loomterm.sessions.session import close_session, save_loom
for model, path in (("loomterm-tests/tiny", sys.argv[1]), (sys.argv[3], sys.argv[2])):
    loom = Loom.load(model, device="cpu")  # the hub id: from the local cache (offline)
    loom.cursor = loom.append(loom.root, "Once upon a time")
    save_loom(loom, path)
    close_session(loom)
"""
HUB_ANSWERS = """
import json, sys
from loomterm.sessions.session import read_file
from loomterm.sessions.identity import same_as_recorded
from loomterm.config.settings import EngineOptions
answers = {}
for name, path in (("hub", sys.argv[1]), ("other", sys.argv[2])):
    record = read_file(path, True)
    for model in ("loomterm-tests/tiny", "loomterm-tests/absent"):
        options = EngineOptions(model=model)
        answers[name + " " + model.split("/")[1]] = same_as_recorded(record.data.model, options)
    record.close()
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"answers": answers, "heavy": heavy}))
"""


def test_whether_a_hub_id_is_a_sessions_model_is_told_without_torch(
    tiny_llama_dir, tiny_gpt2_dir, tmp_path
):
    """``loomterm --model owner/name`` with no -s: a hub id whose files are all in the
    local Hugging Face cache is told by that folder's fingerprint, in a fresh
    interpreter without torch, so the editor paints the recent session at once; an id
    not in the cache, or missing its weights, is None (loading decides, downloading
    with its progress shown)."""
    import os
    import shutil

    repo = tmp_path / "hf" / "hub" / "models--loomterm-tests--tiny"
    snapshot = repo / "snapshots" / "0123abcd"
    shutil.copytree(tiny_llama_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    hub, other = tmp_path / "hub.loom", tmp_path / "other.loom"
    subprocess.run(
        [sys.executable, "-c", HUB_SESSIONS, str(hub), str(other), str(tiny_gpt2_dir)],
        env=env, capture_output=True, timeout=300, check=True,
    )  # fmt: skip

    def answers() -> dict:
        result = subprocess.run(
            [sys.executable, "-c", HUB_ANSWERS, str(hub), str(other)],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return json.loads(result.stdout)

    assert answers() == {
        "answers": {
            "hub tiny": True,
            "hub absent": None,  # not in the cache: the load downloads it, then decides
            "other tiny": False,  # another model: a new session, as loading would say
            "other absent": None,
        },
        "heavy": [],
    }
    for weights in snapshot.glob("*.safetensors"):
        weights.unlink()  # half a download: only the load can tell
    assert answers()["answers"]["hub tiny"] is None
