"""Qwen3-MoE: Qwen3 attention with sparse MoE MLPs (every `decoder_sparse_step`-th layer)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from atom.layers.linear import ReplicatedLinear
from atom.layers.model_context import ModelContext
from atom.layers.moe import FusedMoE, softmax_topk
from atom.layers.norm import RMSNorm
from atom.models.llama import LlamaForCausalLM, LlamaMLP, LlamaModel
from atom.models.qwen3 import Qwen3DecoderLayer


class Qwen3MoeSparseBlock(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any, reduce_results: bool = True) -> None:
        super().__init__()
        self.gate = ReplicatedLinear(mc, hf.hidden_size, hf.num_experts, bias=False)
        self.gate.keep_float = True  # the router: fp8 logits would move expert choices
        self.experts = FusedMoE(mc, hf.num_experts, hf.hidden_size, hf.moe_intermediate_size,
                                reduce_results)
        self.top_k = hf.num_experts_per_tok
        self.renormalize = bool(getattr(hf, "norm_topk_prob", True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.experts(x, *softmax_topk(self.gate(x), self.top_k, self.renormalize))

    def normed_forward(self, norm: RMSNorm, x: torch.Tensor,
                       residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder layer's MLP call; the router and the experts both read the normed x, so
        the norm stays its own op here."""
        x, residual = norm(x, residual)
        return self(x), residual


class Qwen3MoeDecoderLayer(Qwen3DecoderLayer):
    def make_mlp(self, mc: ModelContext, hf: Any, layer_idx: int) -> nn.Module:
        step = getattr(hf, "decoder_sparse_step", 1) or 1
        dense = layer_idx in (getattr(hf, "mlp_only_layers", None) or [])
        reduce = not mc.dp_attention  # DP attention reduce-scatters instead (dp_attention.py)
        if not dense and hf.num_experts > 0 and (layer_idx + 1) % step == 0:
            return Qwen3MoeSparseBlock(mc, hf, reduce)
        return LlamaMLP(mc, hf.hidden_size, hf.intermediate_size, getattr(hf, "hidden_act", "silu"),
                        reduce)


class Qwen3MoeModel(LlamaModel):
    layer_cls = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    model_cls = Qwen3MoeModel
