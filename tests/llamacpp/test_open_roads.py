"""llama.cpp by the one road (``engine.open``): ``--backend auto`` runs a ``.gguf`` file
on llama.cpp once it is built, every road opens the same runner with the same
threads, and ``loomterm generate`` names the backend on stderr."""

from __future__ import annotations

import shutil

from loomterm.config.settings import EngineOptions
from loomterm.engine import Loom
from tests.test_open_roads import roads


def test_auto_runs_a_gguf_on_llama_cpp(binding, default_gguf):
    loom = Loom.load(str(default_gguf), threads=1)
    try:
        assert type(loom.runner).__name__ == "LlamaCppRunner"
        assert loom.runner.where == "cpu · llama.cpp (1 thread)"  # the status bar's
    finally:
        loom.runner.close()


def test_every_road_opens_the_same_llama_cpp_runner(binding, default_gguf, tmp_path):
    other = tmp_path / "other.gguf"  # a second file of the same model, to attach beside
    shutil.copyfile(default_gguf, other)
    engine = EngineOptions(model=str(default_gguf), threads=2)  # auto; not the default 1
    found = roads(str(default_gguf), engine, str(other), tmp_path)
    want = {"kind": "LlamaCppRunner", "backend": "llama.cpp", "threads": 2,
            "precision": None, "quant": "none"}  # fmt: skip
    assert found == {name: want for name in found} and len(found) == 5


def test_generate_names_the_backend(binding, default_gguf, capsys):
    from loomterm.cli import main

    args = ["generate", "-s", "g", "--model", str(default_gguf), "--threads", "1"]
    assert main([*args, "--prompt", "Once", "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert f"loomterm: {default_gguf.stem} on cpu · llama.cpp (1 thread)\n" in err
