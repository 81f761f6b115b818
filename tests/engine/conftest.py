"""Fixtures for engine tests: one loom per tiny model family."""

from __future__ import annotations

import pytest

from tests.helpers import make_loom


@pytest.fixture(params=["llama", "gpt2"])
def family(request):
    return request.param


@pytest.fixture
def loom(family, tiny_llama_dir, tiny_gpt2_dir):
    folder = tiny_llama_dir if family == "llama" else tiny_gpt2_dir
    return make_loom(folder)


@pytest.fixture
def llama_loom(tiny_llama_dir):
    return make_loom(tiny_llama_dir)


@pytest.fixture
def gpt2_loom(tiny_gpt2_dir):
    return make_loom(tiny_gpt2_dir)
