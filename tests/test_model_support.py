"""Models loomterm cannot hold are refused before loading, in one line that says why
(``engine.models.support``): state-space, hybrid, recurrent, latent-attention,
encoder-decoder, encoder-only and audio/image decoders. Every zoo family is accepted."""

from __future__ import annotations

import warnings

import pytest

from loomterm.engine.models.load import load_model
from loomterm.engine.models.support import check_supported, refusal
from loomterm.errors import NotCausalLMError, UnsupportedModelError
from tests.tiny_models import REFUSED, ZOO, build_tokenizer, tiny_config


def refused_config(name: str):
    from transformers import AutoConfig

    model_type, overrides, _ = REFUSED[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model(model_type, **overrides)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_from_the_config_alone_in_one_line(name, tmp_path):
    model_type, _, word = REFUSED[name]
    # The folder holds a config and no weights: the refusal comes before any are read.
    refused_config(name).save_pretrained(tmp_path / name)
    with pytest.raises(UnsupportedModelError) as exc:
        load_model(tmp_path / name, device="cpu")
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"cannot load {model_type} (")
    assert word in message, message
    assert message.endswith("loomterm needs a decoder-only transformer")
    assert isinstance(exc.value, NotCausalLMError)  # what load_model documents


@pytest.mark.parametrize("arch", sorted(ZOO))
def test_every_zoo_family_is_accepted(arch):
    config, _ = tiny_config(arch)
    assert refusal(config) is None
    check_supported(config, arch)


def test_a_real_tiny_mamba_is_refused_not_an_index_error(tmp_path, capsys):
    """A Mamba with weights and a tokenizer, as a writer would bring it: refused by the
    loader and by the command line, in one line (it used to fail inside transformers'
    cache code with an IndexError)."""
    import torch
    from transformers import AutoModelForCausalLM

    from loomterm.cli import main

    tokenizer = build_tokenizer()
    config = refused_config("mamba")
    config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    folder = tmp_path / "tiny-mamba"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(UnsupportedModelError, match="state-space"):
        load_model(folder, device="cpu")
    args = ["generate", "-s", "mamba", "--model", str(folder), "--device", "cpu"]
    code = main([*args, "--prompt", "Once"])
    err = capsys.readouterr().err
    assert code == 1
    # A progress line may come first; the error is the last line, and the only one.
    assert [line for line in err.strip().splitlines() if line.startswith("loomterm:")] == [
        f"loomterm: cannot load mamba ({folder}): a state-space model has no per-token "
        "key/value cache to branch, only a running state; loomterm needs a decoder-only "
        "transformer"
    ]


def test_a_family_not_in_the_table_is_refused_by_its_cache_layers():
    """Qwen3.5 and GLM-MoE-DSA are named nowhere in ``support``: transformers' own
    description of their cache layers (linear attention, an indexer) refuses them."""
    from loomterm.engine.models.support import FAMILIES

    for name in ("qwen3_5_text", "glm_moe_dsa"):
        assert REFUSED[name][0] not in FAMILIES
        assert REFUSED[name][2] in refusal(refused_config(name))


def test_a_cache_loomterm_cannot_read_is_one_line_at_start(tmp_path):
    """Past the config check (here: DeepSeek-V3 loaded around it), a model whose cache
    is not one key and value per token and layer stops the runner in one line."""
    import torch
    from transformers import AutoModelForCausalLM

    from loomterm.engine.local.runner import LocalRunner
    from loomterm.engine.models.load import LoadedModel
    from loomterm.errors import ModelLoadError

    tokenizer = build_tokenizer()
    config = refused_config("deepseek_v3")
    config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    loaded = LoadedModel(
        model, tokenizer, "tiny-deepseek", "", torch.device("cpu"), torch.float32, {}
    )
    with pytest.raises(ModelLoadError) as exc:
        LocalRunner(loaded)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("cannot run tiny-deepseek: its key/value cache is not one key")
