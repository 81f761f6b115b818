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
