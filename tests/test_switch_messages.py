"""Opening the most recent session's model on another backend says why a new session
starts, and how to continue the old one (issue 32): the same model on another backend
is not "another model"."""

from __future__ import annotations

from loomterm.cli.run import say_new_session, switched_backend
from loomterm.config.settings import EngineOptions


def test_same_model_on_another_backend_is_said(capsys):
    record = {"name": "SmolLM2-135M", "source": "/models/SmolLM2-135M.gguf", "dtype": "float32"}
    options = EngineOptions(model="/models/SmolLM2-135M.gguf", backend="llama.cpp")
    backends = switched_backend(record, options)
    assert backends == ("torch", "llama.cpp")
    say_new_session("story", "SmolLM2-135M", backends)
    said = capsys.readouterr().err
    assert "made with SmolLM2-135M on torch; on llama.cpp it has another fingerprint" in said
    assert "--backend torch continues 'story'" in said


def test_another_model_is_said_as_before(capsys):
    record = {"name": "gpt2", "source": "/models/gpt2", "dtype": "float32"}
    options = EngineOptions(model="/models/SmolLM2-135M.gguf", backend="llama.cpp")
    assert switched_backend(record, options) is None
    say_new_session("story", "gpt2", None)
    assert "starting a new session on the model asked for" in capsys.readouterr().err


def test_same_backend_is_no_switch():
    record = {"name": "m", "source": "/models/m.gguf", "backend": "llama.cpp"}
    options = EngineOptions(model="/models/m.gguf", backend="llama.cpp")
    assert switched_backend(record, options) is None
