"""Tiny seeded models built from transformers configs, saved as ordinary HF folders.

They load through the same code path as any local model folder. The tokenizer is a real
byte-level BPE trained on a small corpus, so partial UTF-8 tokens, special tokens and a
chat template all exist as they do in real models.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Once upon a time, in a land far away, there lived a weaver who wove stories.",
    "Language models predict the next token from the tokens before it.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u00fcber \u65e5\u672c\u8a9e \U0001f600 emoji and accents.",
    "def main():\n    print('hello world')\n    return 0\n",
    "User: hello there\nAssistant: hi, how can I help you today?\n",
]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(vocab_size: int = 384):
    """A byte-level BPE tokenizer with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _save(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_llama(folder: Path, seed: int = 0, **overrides) -> Path:
    """A 2-layer Llama (RoPE, half-split convention, grouped-query attention)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        **overrides,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    _scale_up(model)
    return _save(model, tokenizer, folder)


def build_tiny_gpt2(folder: Path, seed: int = 0, **overrides) -> Path:
    """A 2-layer GPT-2 (learned absolute position embeddings: never re-roped)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = build_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **overrides,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    _scale_up(model)
    return _save(model, tokenizer, folder)


def _scale_up(model) -> None:
    """Widen the random init so the tiny model's distribution is peaked, not uniform:
    greedy paths and top-k lists then depend on the context, which the tests need."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2 and "norm" not in name and "ln" not in name:
                param.mul_(4.0)


def build_tiny_family(folder: Path, family: str, seed: int = 0) -> Path:
    """Tiny models of other RoPE conventions, to prove re-rotation per family:
    ``gptj`` (interleaved, partial), ``neox`` (half-split, partial), ``phi`` (half-split,
    partial), ``qwen2`` (half-split), ``llama-linear`` (linear scaling),
    ``llama-yarn`` (YaRN, attention factor), ``llama-dynamic`` (dynamic NTK: never
    shift-invariant)."""
    import torch
    import transformers as tf

    tokenizer = build_tokenizer()
    common = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    llama = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        **common,
    )
    if family == "gptj":
        config = tf.GPTJConfig(
            n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=512, **common
        )
        cls = tf.GPTJForCausalLM
    elif family == "neox":
        config = tf.GPTNeoXConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            rotary_pct=0.25,
            max_position_embeddings=512,
            **common,
        )
        cls = tf.GPTNeoXForCausalLM
    elif family == "phi":
        config = tf.PhiConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            partial_rotary_factor=0.5,
            max_position_embeddings=512,
            **common,
        )
        cls = tf.PhiForCausalLM
    elif family == "qwen2":
        config = tf.Qwen2Config(**llama)
        cls = tf.Qwen2ForCausalLM
    elif family.startswith("llama-"):
        kind = family.split("-", 1)[1]
        params = {"rope_type": kind, "rope_theta": 10000.0, "factor": 2.0}
        if kind == "yarn":
            params["original_max_position_embeddings"] = 256
        config = tf.LlamaConfig(rope_parameters=params, **llama)
        cls = tf.LlamaForCausalLM
    else:
        raise ValueError(family)
    torch.manual_seed(seed)
    model = cls(config)
    _scale_up(model)
    return _save(model, tokenizer, folder)


# -- the zoo: one tiny seeded model per decoder-only family transformers ships -----------
# Each entry: (model_type, config overrides). Shared defaults give a 2-layer model with
# hidden size 64, 4 query heads and 2 KV heads; the overrides name what makes the family
# itself (its attention features, position scheme, experts). Sliding windows are small
# (8 tokens) so the zoo's paths, 20 to 60 tokens long, really cross them.
_LLAMA_LIKE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
_SLIDING_GLOBAL = dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"])
_MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)
ZOO: dict[str, tuple[str, dict]] = {
    "llama": ("llama", {}),
    "mistral": ("mistral", dict(sliding_window=8)),
    "mixtral": ("mixtral", dict(sliding_window=8, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2": ("qwen2", {}),
    "qwen2_moe": (
        "qwen2_moe",
        dict(num_experts=4, shared_expert_intermediate_size=64, **_MOE),
    ),
    "qwen3": ("qwen3", dict(head_dim=16)),
    "qwen3_moe": ("qwen3_moe", dict(head_dim=16, num_experts=4, **_MOE)),
    "gemma": ("gemma", dict(head_dim=16)),
    "gemma2": (
        "gemma2",
        dict(
            head_dim=16,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            **_SLIDING_GLOBAL,
        ),
    ),
    "gemma3_text": (
        "gemma3_text",
        dict(
            head_dim=16,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
            **_SLIDING_GLOBAL,
        ),
    ),
    # Gemma 3's class runs SDPA; a config asking for logit soft-capping runs eager, which
    # applies a cap wherever a model passes it on (Gemma 3's attention in transformers
    # 5.25 does not: then eager equals SDPA, exactly as slow as transformers itself).
    "gemma3_text-softcap": (
        "gemma3_text",
        dict(head_dim=16, attn_logit_softcapping=50.0, **_SLIDING_GLOBAL),
    ),
    # Gemma 3's multimodal checkpoint (Gemma3ForConditionalGeneration): text-only use.
    "gemma3": (
        "gemma3",
        dict(
            text_of="gemma3_text",
            vision_config=dict(
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                image_size=28,
                patch_size=14,
            ),
            mm_tokens_per_image=4,
        ),
    ),
    "phi": ("phi", dict(partial_rotary_factor=0.5, num_key_value_heads=4)),
    "phi3": ("phi3", {}),
    "phi3-longrope": (
        "phi3",
        dict(
            max_position_embeddings=512,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0] * 8,
                "long_factor": [2.0] * 8,
                "original_max_position_embeddings": 256,
            },
        ),
    ),
    "stablelm": ("stablelm", dict(partial_rotary_factor=0.25, num_key_value_heads=4)),
    "gpt_neox": ("gpt_neox", dict(rotary_pct=0.25, num_key_value_heads=4)),
    "gptj": ("gptj", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=512)),
    "gpt2": ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, n_positions=512)),
    "opt": (
        "opt",
        dict(
            hidden_size=64,
            ffn_dim=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            word_embed_proj_dim=64,
        ),
    ),
    "falcon": ("falcon", dict(new_decoder_architecture=True, num_kv_heads=2)),
    "falcon-alibi": ("falcon", dict(alibi=True, multi_query=True, parallel_attn=True)),
    "bloom": ("bloom", dict(hidden_size=64, n_layer=2, n_head=4)),
    "mpt": ("mpt", dict(d_model=64, n_layers=2, n_heads=4, expansion_ratio=2, max_seq_len=512)),
    "starcoder2": ("starcoder2", dict(sliding_window=8)),
    "cohere": ("cohere", {}),
    "cohere2": ("cohere2", dict(head_dim=16, **_SLIDING_GLOBAL)),
    "olmo": ("olmo", {}),
    "olmo2": ("olmo2", {}),
    "granite": ("granite", dict(attention_multiplier=0.5, logits_scaling=2.0)),
    "smollm3": ("smollm3", dict(no_rope_layers=[1, 0])),
    "glm": ("glm", dict(head_dim=16, partial_rotary_factor=0.5)),
    "ernie4_5": ("ernie4_5", dict(head_dim=16)),
    "gpt_oss": (
        "gpt_oss",
        dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2, **_SLIDING_GLOBAL),
    ),
    "vaultgemma": ("vaultgemma", dict(head_dim=16, attn_logit_softcapping=50.0)),
    "codegen": ("codegen", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=512)),
    "gpt_neo": (
        "gpt_neo",
        dict(
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            attention_types=[[["global", "local"], 1]],
            window_size=8,
        ),
    ),
    "gpt_bigcode": ("gpt_bigcode", dict(n_embd=64, n_layer=2, n_head=4, n_positions=512)),
    "persimmon": ("persimmon", dict(num_key_value_heads=4)),
    "olmo3": ("olmo3", dict(**_SLIDING_GLOBAL)),
    "olmoe": ("olmoe", dict(num_experts=4, num_experts_per_tok=2)),
    "granitemoe": ("granitemoe", dict(num_local_experts=4, num_experts_per_tok=2)),
    "exaone4": ("exaone4", dict(**_SLIDING_GLOBAL)),
    "helium": ("helium", dict(head_dim=16)),
    "ministral": ("ministral", dict(head_dim=16, **_SLIDING_GLOBAL)),
    "seed_oss": ("seed_oss", dict(head_dim=16)),
    "apertus": ("apertus", {}),
    "arcee": ("arcee", dict(head_dim=16)),
    "nemotron": ("nemotron", dict(head_dim=16, partial_rotary_factor=0.5)),
    "glm4": ("glm4", dict(head_dim=16)),
    "glm4_moe": (
        "glm4_moe",
        dict(
            head_dim=16,
            n_routed_experts=4,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            **_MOE,
        ),
    ),
    "ernie4_5_moe": (
        "ernie4_5_moe",
        dict(head_dim=16, moe_num_experts=4, moe_k=2, moe_intermediate_size=32),
    ),
    "hunyuan_v1_dense": ("hunyuan_v1_dense", dict(head_dim=16)),
    "llama4_text": (
        "llama4_text",
        dict(
            head_dim=16,
            num_local_experts=2,
            num_experts_per_tok=1,
            intermediate_size_mlp=128,
            attention_chunk_size=8,
            no_rope_layers=[1, 0],
            interleave_moe_layer_step=2,
        ),
    ),
    "bitnet": ("bitnet", {}),
    "diffllama": ("diffllama", dict(head_dim=16)),
    "phimoe": ("phimoe", dict(num_local_experts=4, num_experts_per_tok=2)),
    "jetmoe": ("jetmoe", dict(num_local_experts=4, num_experts_per_tok=2, kv_channels=16)),
    "biogpt": ("biogpt", {}),
    "xglm": ("xglm", dict(d_model=64, num_layers=2, attention_heads=4, ffn_dim=128)),
    "cohere2_moe": ("cohere2_moe", dict(head_dim=16, **_SLIDING_GLOBAL)),
    "minimax_m2": ("minimax_m2", dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2)),
    "hunyuan_v1_moe": ("hunyuan_v1_moe", dict(head_dim=16, num_experts=4, moe_topk=2)),
    "llama-yarn": (
        "llama",
        dict(
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 2.0,
                "original_max_position_embeddings": 256,
            }
        ),
    ),
}
# Families loomterm refuses before loading (``engine.models.support``), as tiny configs:
# (model_type, overrides, a word the one-line refusal must hold).
REFUSED: dict[str, tuple[str, dict, str]] = {
    "mamba": ("mamba", dict(hidden_size=64, num_hidden_layers=2, state_size=8), "state-space"),
    "mamba2": (
        "mamba2",
        dict(hidden_size=64, num_hidden_layers=2, num_heads=4, head_dim=32, state_size=8),
        "state-space",
    ),
    "falcon_mamba": ("falcon_mamba", dict(hidden_size=64, num_hidden_layers=2), "state-space"),
    "jamba": ("jamba", dict(_LLAMA_LIKE, num_experts=2), "hybrid"),
    "zamba": ("zamba", dict(hidden_size=64), "hybrid"),
    "zamba2": ("zamba2", dict(hidden_size=64), "hybrid"),
    # Not named in support.FAMILIES: refused by their cache layer kinds alone.
    "qwen3_5_text": ("qwen3_5_text", dict(hidden_size=64), "hybrid"),
    "glm_moe_dsa": ("glm_moe_dsa", dict(hidden_size=64), "sparse"),
    "falcon_h1": ("falcon_h1", dict(_LLAMA_LIKE), "hybrid"),
    "bamba": ("bamba", dict(_LLAMA_LIKE), "hybrid"),
    "granitemoehybrid": ("granitemoehybrid", dict(_LLAMA_LIKE), "hybrid"),
    "nemotron_h": ("nemotron_h", dict(hidden_size=64), "hybrid"),
    "qwen3_next": ("qwen3_next", dict(_LLAMA_LIKE), "hybrid"),
    "lfm2": ("lfm2", dict(hidden_size=64, num_hidden_layers=2), "hybrid"),
    "rwkv": ("rwkv", dict(hidden_size=64, num_hidden_layers=2), "recurrent"),
    "recurrent_gemma": ("recurrent_gemma", dict(hidden_size=64), "recurrent"),
    "xlstm": ("xlstm", dict(hidden_size=64), "recurrent"),
    "t5": ("t5", dict(d_model=16, num_layers=1, num_heads=2, d_ff=32), "encoder-decoder"),
    "bart": ("bart", dict(d_model=16, encoder_layers=1, decoder_layers=1), "encoder-decoder"),
    "whisper": ("whisper", dict(d_model=16), "encoder-decoder"),
    "bert": ("bert", dict(hidden_size=16, num_hidden_layers=1), "encoder-only"),
    "roberta": ("roberta", dict(hidden_size=16, num_hidden_layers=1), "encoder-only"),
    "deepseek_v3": (
        "deepseek_v3",
        dict(
            _LLAMA_LIKE,
            kv_lora_rank=16,
            q_lora_rank=32,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            n_routed_experts=4,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
            **_MOE,
        ),
        "latent",
    ),
    "deepseek_v2": ("deepseek_v2", dict(_LLAMA_LIKE, kv_lora_rank=16), "latent"),
    "minicpm3": ("minicpm3", dict(_LLAMA_LIKE, kv_lora_rank=16), "latent"),
    "gemma3n_text": ("gemma3n_text", {}, "reuse"),
    "musicgen": ("musicgen", {}, "audio"),
    "trocr": ("trocr", dict(d_model=16), "audio or images"),
    "llava": ("llava", {}, "vision-language"),
    "mistral3": ("mistral3", {}, "vision-language"),
}
# Families whose config field names differ from Llama's: no Llama-like defaults.
_OWN_FIELDS = {"gptj", "gpt2", "opt", "bloom", "mpt", "codegen", "gpt_neo", "gpt_bigcode", "xglm"}


def tiny_config(arch: str, **changes):
    """The zoo's config for ``arch`` (a key of ``ZOO``), with the shared tokenizer's ids;
    ``changes`` override the zoo's own settings."""
    from transformers import AutoConfig

    model_type, overrides = ZOO[arch]
    if "text_of" in overrides:  # a multimodal wrapper around another zoo entry's text model
        rest = {k: v for k, v in overrides.items() if k != "text_of"}
        text, tokenizer = tiny_config(overrides["text_of"])
        return AutoConfig.for_model(model_type, text_config=text.to_dict(), **rest), tokenizer
    tokenizer = build_tokenizer()
    kwargs = {} if model_type in _OWN_FIELDS else dict(_LLAMA_LIKE)
    kwargs.update(overrides)
    kwargs.update(changes)
    return AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        **kwargs,
    ), tokenizer


def build_tiny_arch(folder: Path, arch: str, seed: int = 0, **changes) -> Path:
    """Save the zoo's tiny seeded ``arch`` model (a key of ``ZOO``) as a model folder;
    ``changes`` override config settings."""
    import torch
    from transformers import AutoModelForCausalLM

    config, tokenizer = tiny_config(arch, **changes)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    _scale_up(model)
    return _save(model, tokenizer, folder)
