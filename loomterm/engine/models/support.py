"""Which models loomterm can hold, decided from the config before any weight is read.

The loom branches a per-token key/value cache: every node keeps the keys and values of
its own tokens, and a branch is a prefix of columns plus its own. That needs a
decoder-only transformer whose cache is, per layer, one key and one value per token.
A model whose state is not that cannot be branched, and is refused in one line that
says why, before loading:

- state-space (Mamba, Mamba2, Falcon-Mamba) and recurrent models (RWKV, xLSTM,
  RecurrentGemma) carry one running state, not per-token entries;
- hybrids (Jamba, Zamba, Falcon-H1, Bamba, Granite-4 hybrid, Nemotron-H, Qwen3-Next,
  LFM2...) mix such layers with attention: their attention layers could branch, their
  state layers cannot;
- multi-head latent attention (DeepSeek-V2/V3, MiniCPM3, Kimi...) caches a compressed
  latent and a shared rotary key, of other sizes than per-head keys and values;
- sparse or indexed attention (DeepSeek-V3.2's indexer, compressed attention) and KV
  shared across layers (Gemma 3n, Gemma 4) keep more or less than one entry per token
  per layer;
- encoder-decoder models (T5, BART, Whisper...) decode against an encoder's output,
  and encoder-only ones (BERT, RoBERTa...) attend both ways: neither is a token stream;
- audio and image-to-text decoders (MusicGen, Moshi, TrOCR...) have no text-only path,
  nor do vision-language wrappers transformers has no causal-LM class for (Llava,
  Qwen2-VL, Mistral 3: the line names the language model inside). Wrappers it runs as
  a causal LM (Gemma 3's, Llama 4's) load, text only.

The rules read transformers' own description of a model's cache layers
(``cache_utils.get_layer_types_and_kwargs``) where it has one, so a new hybrid family
is refused without being named here; the table names the families whose config does
not say it.
"""

from __future__ import annotations

__all__ = ["check_supported", "refusal"]

_NEEDS = "loomterm needs a decoder-only transformer"
_STATE_SPACE = (
    "a state-space model has no per-token key/value cache to branch, only a running state"
)
_RECURRENT = "a recurrent model has no per-token key/value cache to branch, only a running state"
_HYBRID = (
    "a hybrid model's state-space or linear-attention layers keep a running state, "
    "not a per-token key/value cache to branch"
)
_LATENT = "multi-head latent attention caches a compressed latent, not per-head keys and values"
_SPARSE = "its sparse or compressed attention caches more than one key/value per token and layer"
_SHARED = "some of its layers reuse another layer's keys and values, which loomterm's cache keeps once per layer"
_ENC_DEC = "an encoder-decoder model decodes against its encoder's output, not one token stream"
_ENCODER = "an encoder-only model attends in both directions and does not predict the next token"
_NOT_TEXT = "its decoder reads audio or images, with no text-only path"
_VISION = (
    "a vision-language model whose transformers class has no text-only causal-LM path "
    "(its language model is a {text} model: load that on its own)"
)

# Families whose config does not describe its layers as state layers.
FAMILIES: dict[str, str] = {
    "mamba": _STATE_SPACE,
    "mamba2": _STATE_SPACE,
    "falcon_mamba": _STATE_SPACE,
    "rwkv": _RECURRENT,
    "xlstm": _RECURRENT,
    "recurrent_gemma": _RECURRENT,
    "jamba": _HYBRID,
    "zamba": _HYBRID,
    "zamba2": _HYBRID,
    "falcon_h1": _HYBRID,
    "bamba": _HYBRID,
    "granitemoehybrid": _HYBRID,
    "nemotron_h": _HYBRID,
    "lfm2": _HYBRID,
    "lfm2_moe": _HYBRID,
    "lfm3": _HYBRID,
    "minimax": _HYBRID,
    "qwen3_next": _HYBRID,
    "kimi_linear": _HYBRID,
    "olmo_hybrid": _HYBRID,
    "bailing_hybrid": _HYBRID,
    "t5": _ENC_DEC,
    "mt5": _ENC_DEC,
    "umt5": _ENC_DEC,
    "bart": _ENC_DEC,
    "mbart": _ENC_DEC,
    "whisper": _ENC_DEC,
    "trocr": _NOT_TEXT,
    "musicgen": _NOT_TEXT,
    "musicgen_melody": _NOT_TEXT,
    "moshi": _NOT_TEXT,
    "moss_transcribe_diarize": _NOT_TEXT,
    "xlnet": "XLNet predicts tokens in permuted orders with a memory, not a key/value cache",
    "reformer": _ENCODER,
}
# Cache layer kinds (transformers' names) that are one key and one value per token.
_ATTENTION_LAYERS = {"full_attention", "sliding_attention", "chunked_attention", "dummy"}
_STATE_LAYERS = {"linear_attention", "conv", "hybrid", "hybrid_sliding", "mamba", "recurrent"}


def refusal(config) -> str | None:
    """Why loomterm cannot hold a model of ``config`` (a transformers config), or None."""
    model_type = str(getattr(config, "model_type", "") or "")
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    if getattr(config, "is_encoder_decoder", False):
        return _ENC_DEC
    if _is_encoder(model_type):
        return _ENCODER
    try:
        text = config.get_text_config(decoder=True)
    except Exception:  # noqa: BLE001 - an odd config: judge the outer one
        text = config
    if text is not config and not _is_causal_lm(model_type):
        # Llava, Qwen2-VL, Mistral 3...: a wrapper transformers does not run as a
        # causal LM (Gemma 3's and Llama 4's wrappers it does, and they load).
        return _VISION.format(text=getattr(text, "model_type", None) or "text")
    if getattr(text, "is_encoder_decoder", False):
        return _ENC_DEC
    kinds = _layer_kinds(text)
    state = kinds & _STATE_LAYERS
    if state:
        if kinds <= _STATE_LAYERS:
            return _STATE_SPACE
        return _HYBRID
    if kinds - _ATTENTION_LAYERS:
        return _SPARSE
    if _read(text, "kv_lora_rank"):
        return _LATENT
    modes = _read(text, "kv_sharing_modes") or []
    if any(mode == "reuse" for mode in modes) or _read(text, "num_kv_shared_layers"):
        return _SHARED
    return None


def check_supported(config, source: str) -> None:
    """Raise ``UnsupportedModelError`` (one line) when loomterm cannot hold ``config``'s
    model; ``source`` names it for the user (a path, a hub id)."""
    from loomterm.errors import UnsupportedModelError

    reason = refusal(config)
    if reason is None:
        return
    model_type = str(getattr(config, "model_type", "") or "unknown")
    where = f" ({source})" if source and source != model_type else ""
    raise UnsupportedModelError(f"cannot load {model_type}{where}: {reason}; {_NEEDS}")


def _is_encoder(model_type: str) -> bool:
    """Whether transformers files ``model_type`` under masked language models (BERT and
    its kind), which attend both ways even where a causal-LM head exists."""
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES
    except ImportError:  # pragma: no cover - transformers always has it
        return False
    return model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _is_causal_lm(model_type: str) -> bool:
    """Whether transformers has a causal-LM class for ``model_type``."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def _layer_kinds(config) -> set[str]:
    """The cache layer kinds transformers would build for ``config`` (empty when it
    cannot say)."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        kinds, _ = get_layer_types_and_kwargs(config)
    except Exception:  # noqa: BLE001 - older transformers, or a config it cannot read
        kinds = getattr(config, "layer_types", None) or []
    return {str(kind) for kind in kinds}


def _read(config, name: str):
    """``config.name``, or True where transformers keeps it per layer (it is set)."""
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a per-layer attribute read globally
        return True
