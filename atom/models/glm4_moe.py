"""GLM-4.5 / 4.6 (`Glm4MoeForCausalLM`): Llama attention with partial rotary, q/k/v biases and
optional per-head q/k norms, over DeepSeek-V3's MoE (sigmoid router with a selection bias and
expert groups, shared experts, the first `first_k_dense_replace` layers dense) — the layout of
transformers' modeling_glm4_moe, whose checkpoints' names these modules carry.
"""
from __future__ import annotations

import re
from typing import Any

from torch import nn

from atom.layers.model_context import ModelContext
from atom.models.deepseek_v3 import DeepseekV3MoE
from atom.models.llama import (LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP,
                               LlamaModel)

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


class Glm4MoeAttention(LlamaAttention):
    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, qkv_bias: bool,
                 o_bias: bool) -> None:
        self.qk_norm = bool(getattr(hf, "use_qk_norm", False))  # GLM-4.5: off; the class: off
        super().__init__(mc, hf, layer_idx, qkv_bias, o_bias)


class Glm4MoeDecoderLayer(LlamaDecoderLayer):
    attention_cls = Glm4MoeAttention

    def make_mlp(self, mc: ModelContext, hf: Any, layer_idx: int) -> nn.Module:
        if layer_idx >= hf.first_k_dense_replace:
            return DeepseekV3MoE(mc, hf)
        return LlamaMLP(mc, hf.hidden_size, hf.intermediate_size,
                        getattr(hf, "hidden_act", "silu"))


class Glm4MoeModel(LlamaModel):
    layer_cls = Glm4MoeDecoderLayer


class Glm4MoeForCausalLM(LlamaForCausalLM):
    model_cls = Glm4MoeModel

    @staticmethod
    def attention_biases(hf: Any, bias: bool) -> tuple[bool, bool]:
        """`attention_bias` is on q, k and v; o_proj has none."""
        return bias, False

    def skip_weight(self, name: str) -> bool:
        """GLM-4.5's checkpoints carry their MTP layer (`num_nextn_predict_layers`) as decoder
        index num_hidden_layers: not loaded (nor the layers a reduced-depth run leaves out)."""
        m = _LAYER.match(name)
        return m is not None and int(m.group(1)) >= self.hf_config.num_hidden_layers
