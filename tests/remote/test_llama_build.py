"""The llama.cpp build's answers without building: the cached binary is found, a
named one is checked, and a machine without the tools gets one line saying which.
(The build itself runs once for the session: ``test_the_build_serves_server_and_binding``.)"""

from __future__ import annotations

import os
import stat

import pytest

from loomterm.serving import llama_build
from loomterm.serving.llama_build import BuildError, ensure_llama_server, find_llama_server


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOMTERM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(llama_build.ENV_BINARY, raising=False)
    return tmp_path / "cache"


def test_no_cmake_is_one_line_and_builds_nothing(empty_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(BuildError) as caught:
        ensure_llama_server()
    assert str(caught.value) == (
        "cannot build llama.cpp: cmake is not installed (e.g. apt-get install cmake)"
    )
    assert not (empty_cache / "llama.cpp").exists()


def test_no_compiler_is_one_line(empty_cache, tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    cmake = tools / "cmake"
    cmake.write_text("#!/bin/sh\nexit 0\n")
    cmake.chmod(cmake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(BuildError, match=r"^cannot build llama.cpp: no C\+\+ compiler found"):
        ensure_llama_server()


def test_a_cached_or_named_binary_is_used_as_is(empty_cache, tmp_path, monkeypatch):
    assert find_llama_server() is None
    cached = llama_build.binary_path()
    cached.parent.mkdir(parents=True)
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)
    assert find_llama_server() is None  # a binary without its shared libraries is not a build
    llama_build.library_dir().mkdir()
    (llama_build.library_dir() / "libllama.so").write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no tools needed now
    assert ensure_llama_server() == cached
    monkeypatch.setenv(llama_build.ENV_BINARY, str(tmp_path / "missing"))
    with pytest.raises(BuildError, match="LOOMTERM_LLAMA_SERVER=.* is not an executable file"):
        find_llama_server()
    assert os.access(cached, os.X_OK)


def test_a_build_from_before_builds_were_named_for_their_cpu_is_removed(empty_cache):
    """``llama.cpp/<version>/{bin,lib,python}`` (another CPU's, perhaps) is deleted; the
    build named for this CPU beside it is kept and used."""
    version = llama_build.home().parent
    for name in ("bin", "lib", "python"):
        (version / name).mkdir(parents=True)
        (version / name / "old").write_bytes(b"")
    server = llama_build.binary_path()
    server.parent.mkdir(parents=True)
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    llama_build.library_dir().mkdir()
    (llama_build.library_dir() / "libllama.so").write_bytes(b"")
    (llama_build.binding_dir() / "llama_cpp").mkdir(parents=True)
    (llama_build.binding_dir() / "llama_cpp" / "llama_cpp.py").write_text("")
    assert llama_build.ensure_llama_cpp() == llama_build.home()
    assert sorted(p.name for p in version.iterdir()) == [llama_build.home().name]
    assert llama_build.binding_ready()
