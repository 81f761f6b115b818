"""A llama.cpp library decodes in a child process before it decodes in this one, once
per library (``first_decode``): a build that crashes on this CPU is one line, not a dead
editor. The crashing child is a real process killed by a real signal."""

from __future__ import annotations

import pytest

from loomterm.engine import Loom
from loomterm.engine.llamacpp import first_decode
from loomterm.engine.llamacpp.binding import BindingError, library_path
from tests.llamacpp.conftest import THREADS

CRASH = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"


@pytest.fixture
def unchecked(monkeypatch, tmp_path):
    """No library checked yet: an empty marker folder and a new process's memory."""
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(first_decode, "_checked", set())
    return tmp_path


def test_a_library_that_decoded_is_remembered(binding, default_gguf, unchecked, monkeypatch):
    marker = first_decode.marker_path(library_path(binding), default_gguf)
    assert marker is not None and not marker.exists()
    first_decode.check_first_decode(binding, default_gguf)
    assert marker.is_file()  # the real child decoded
    monkeypatch.setattr(first_decode, "_checked", set())  # a later start of the editor
    monkeypatch.setattr(first_decode, "CHILD", CRASH)
    first_decode.check_first_decode(binding, default_gguf)  # no child ran: it would die
    other = unchecked / "other.gguf"  # another model file is checked for itself
    other.write_bytes(b"GGUF")
    assert first_decode.marker_path(library_path(binding), other) not in (None, marker)


def test_a_build_that_crashes_is_one_line_and_not_remembered(
    binding, default_gguf, unchecked, monkeypatch
):
    monkeypatch.setattr(first_decode, "CHILD", CRASH)
    with pytest.raises(BindingError) as caught:
        Loom.load(model=str(default_gguf), backend="llama.cpp", n_ctx=256, threads=THREADS)
    text = str(caught.value)
    assert "\n" not in text and "SIGSEGV" in text and "loomterm build-llama" in text
    assert not first_decode.marker_path(library_path(binding), default_gguf).exists()
    with pytest.raises(BindingError):  # asked again at the next start
        first_decode.check_first_decode(binding, default_gguf)


def test_progress_names_the_check(binding, default_gguf, unchecked):
    stages = []
    first_decode.check_first_decode(binding, default_gguf, lambda s, d, t: stages.append(s))
    assert stages and set(stages) == {first_decode.STAGE}
