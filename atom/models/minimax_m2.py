"""MiniMax-M2 (`MiniMaxM2ForCausalLM`): GQA attention with partial rotary and q/k RMSNorms over
the whole projection (all heads at once, not per head), and a sparse MoE in every layer routed
by sigmoid scores with a selection bias (no groups, no shared experts, weights renormalized) —
transformers' modeling_minimax_m2. Module names follow the checkpoints (`block_sparse_moe`,
Mixtral-style experts `w1`/`w3`/`w2`), so weights load by name.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from atom.layers.model_context import ModelContext
from atom.layers.moe import FusedMoE, grouped_topk
from atom.layers.norm import RMSNorm
from atom.models.llama import LlamaAttention, LlamaForCausalLM, LlamaModel


class ShardedRMSNorm(nn.Module):
    """RMSNorm over a vector whose heads are split across TP ranks: each rank's sum of squares
    is all-reduced, so the norm is the one over the whole projection. `replicas` is how many
    ranks hold each head (KV heads replicated when fewer than ranks), which the sum counts once."""

    def __init__(self, mc: ModelContext, full: int, local: int, eps: float,
                 replicas: int) -> None:
        super().__init__()
        self.parallel = mc.parallel
        self.full, self.eps, self.replicas = full, eps, replicas
        self.weight = nn.Parameter(torch.ones(local), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        n = param.shape[0]
        start = (self.parallel.tp_rank // self.replicas) * n
        param.data.copy_(loaded.narrow(0, start, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        sq = xf.pow(2).sum(-1, keepdim=True)
        if self.parallel.tp_size > 1:
            sq = self.parallel.all_reduce(sq) / self.replicas
        return (xf * torch.rsqrt(sq / self.full + self.eps)).to(x.dtype) * self.weight


class MiniMaxM2Attention(LlamaAttention):
    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, qkv_bias: bool,
                 o_bias: bool) -> None:
        super().__init__(mc, hf, layer_idx, qkv_bias, o_bias)
        n, d = mc.parallel.tp_size, self.head_dim
        kv_replicas = max(1, n // hf.num_key_value_heads)
        self.q_norm = ShardedRMSNorm(mc, hf.num_attention_heads * d, self.num_heads * d,
                                     hf.rms_norm_eps, 1)
        self.k_norm = ShardedRMSNorm(mc, hf.num_key_value_heads * d, self.num_kv_heads * d,
                                     hf.rms_norm_eps, kv_replicas)

    def forward(self, positions: torch.Tensor, qkv: torch.Tensor) -> torch.Tensor:
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = self.q_norm(q).reshape(-1, self.num_heads, self.head_dim)
        k = self.k_norm(k).reshape(-1, self.num_kv_heads, self.head_dim)
        v = v.reshape(-1, self.num_kv_heads, self.head_dim)
        rope = self.rotary_emb
        return self.o_proj(self.attn(q, k, v, positions, rope.cos_sin_cache, rope.is_neox))


class MiniMaxM2Gate(nn.Module):
    """`block_sparse_moe.gate`: the router matrix, in float32 (as GroupedTopKRouter keeps
    DeepSeek's: bf16 router logits of near-tied experts flip the choice)."""

    def __init__(self, hidden: int, num_experts: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden, dtype=torch.float32),
                                   requires_grad=False)


class MiniMaxM2SparseMoeBlock(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any) -> None:
        super().__init__()
        e = hf.num_local_experts
        self.top_k = hf.num_experts_per_tok
        self.gate = MiniMaxM2Gate(hf.hidden_size, e)
        self.e_score_correction_bias = nn.Parameter(torch.empty(e, dtype=torch.float32),
                                                    requires_grad=False)
        self.experts = FusedMoE(mc, e, hf.hidden_size, hf.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One expert group holding every expert is a plain biased top-k: grouped_topk's rule
        with n_group = topk_group = 1, weights renormalized and unscaled."""
        logits = F.linear(x.float(), self.gate.weight)
        weights, experts = grouped_topk(logits, self.e_score_correction_bias, self.top_k, 1, 1,
                                        True, 1.0)
        return self.experts(x, weights, experts)


class MiniMaxM2DecoderLayer(nn.Module):
    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, qkv_bias: bool,
                 o_bias: bool) -> None:
        super().__init__()
        self.self_attn = MiniMaxM2Attention(mc, hf, layer_idx, qkv_bias, o_bias)
        self.block_sparse_moe = MiniMaxM2SparseMoeBlock(mc, hf)
        self.input_layernorm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)

    def forward(self, positions: torch.Tensor, x: torch.Tensor,
                residual: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        qkv, residual = self.input_layernorm.project(x, residual, self.self_attn.qkv_proj)
        x = self.self_attn(positions, qkv)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.block_sparse_moe(x), residual


class MiniMaxM2Model(LlamaModel):
    layer_cls = MiniMaxM2DecoderLayer


class MiniMaxM2ForCausalLM(LlamaForCausalLM):
    model_cls = MiniMaxM2Model
