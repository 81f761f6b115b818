"""Write a tiny Llama Hugging Face folder out as a GGUF file, with the ``gguf`` package.

The file holds float32 tensors and a GPT-2 style BPE vocabulary, laid out as llama.cpp's
converter lays them out (query and key rows permuted, llama.cpp tensor names), so that
transformers' GGUF loader reads it back as the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

TENSOR_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
TOP_LEVEL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def _permute(weights, n_head: int):
    """llama.cpp's row order for query/key weights (the inverse of transformers')."""
    shape = weights.shape
    return (
        weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:])
        .swapaxes(1, 2)
        .reshape(shape)
    )


def write_llama_gguf(folder: Path, out: Path) -> Path:
    """Write the Llama model in ``folder`` (see ``tiny_models.build_tiny_llama``) to ``out``."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    rope_theta = config.get("rope_theta") or config["rope_parameters"]["rope_theta"]

    writer = gguf.GGUFWriter(str(out), arch="llama")
    writer.add_name(folder.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    vocab = {**tokenizer["model"]["vocab"], **added}
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in added else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)

    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    for name, weights in load_file(str(folder / "model.safetensors")).items():
        if name in TOP_LEVEL_NAMES:
            gguf_name = TOP_LEVEL_NAMES[name]
        else:
            parts = name.split(".")  # model.layers.<i>.<module...>.weight
            module = ".".join(parts[3:-1])
            gguf_name = f"blk.{parts[2]}.{TENSOR_NAMES[module]}.weight"
            if module == "self_attn.q_proj":
                weights = _permute(weights, n_head)
            elif module == "self_attn.k_proj":
                weights = _permute(weights, n_kv)
        writer.add_tensor(gguf_name, np.ascontiguousarray(weights, dtype=np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
