"""Architecture name (HF `architectures[0]`) → model class."""
from __future__ import annotations

import importlib

_ARCHITECTURES = {
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
_PLANNED = {"DeepseekV2ForCausalLM", "KimiK2ForCausalLM"}


def supported_architectures() -> list[str]:
    return sorted(_ARCHITECTURES)


def check_architecture(name: str) -> None:
    from atom.config.errors import ConfigError

    if name in _ARCHITECTURES:
        return
    if name in _PLANNED:
        raise ConfigError("model", name, f"architecture {name} is not implemented yet")
    raise ConfigError("model", name, f"architecture {name} is not supported "
                      f"(supported: {', '.join(supported_architectures())})")


def model_class(name: str) -> type:
    check_architecture(name)
    module, cls = _ARCHITECTURES[name].split(":")
    return getattr(importlib.import_module(module), cls)
