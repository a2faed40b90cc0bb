"""Reading a GGUF file once: parsing its header (the vocabulary alone is ~100k fields) costs
seconds, so one parsed reader per file and modification time is kept for the process."""
from __future__ import annotations

import functools
import os
from typing import Any

_ARCH_CONFIG = {"llama": ("llama", "LlamaForCausalLM"), "qwen2": ("qwen2", "Qwen2ForCausalLM"),
                "qwen3": ("qwen3", "Qwen3ForCausalLM")}


@functools.lru_cache(maxsize=2)
def _reader(path: str, mtime: float) -> Any:
    from gguf import GGUFReader

    return GGUFReader(path)


def reader(path: str) -> Any:
    return _reader(str(path), os.path.getmtime(path))


def field(r: Any, key: str) -> Any:
    f = r.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    return bytes(v).decode() if v.dtype.kind == "u" and v.dtype.itemsize == 1 else v.tolist()[0]


def architecture(r: Any) -> str:
    return field(r, "general.architecture")


def hf_config(path: str) -> Any:
    """A transformers config built from the GGUF's metadata (no second parse of the file)."""
    from atom.models.hf_config import config_for_model

    r = reader(path)
    arch = architecture(r)
    if arch not in _ARCH_CONFIG:
        raise NotImplementedError(f"GGUF architecture {arch!r} is not supported")
    model_type, cls = _ARCH_CONFIG[arch]
    g = lambda k: field(r, f"{arch}.{k}")
    names = {t.name for t in r.tensors}
    heads = int(g("attention.head_count"))
    hidden = int(g("embedding_length"))
    vocab = g("vocab_size") or len(r.fields["tokenizer.ggml.tokens"].data)
    kw: dict[str, Any] = dict(
        architectures=[cls], vocab_size=int(vocab), hidden_size=hidden,
        intermediate_size=int(g("feed_forward_length")), num_hidden_layers=int(g("block_count")),
        num_attention_heads=heads, num_key_value_heads=int(g("attention.head_count_kv") or heads),
        max_position_embeddings=int(g("context_length")),
        rms_norm_eps=float(g("attention.layer_norm_rms_epsilon")),
        rope_theta=float(g("rope.freq_base") or 10000.0),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=field(r, "tokenizer.ggml.bos_token_id"),
        eos_token_id=field(r, "tokenizer.ggml.eos_token_id"))
    key_len = g("attention.key_length")
    if key_len:
        kw["head_dim"] = int(key_len)
    return config_for_model(model_type, **kw)
