"""Llama (Llama-2/3.x, SmolLM2, and the base of the Qwen family): readable top to bottom.

Module names follow the HF checkpoints so weights load by name; q/k/v and gate/up are packed
into one matmul each (`packed_modules_mapping` tells the loader where each HF tensor goes).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from atom.layers.attention import PagedAttention
from atom.layers.dp_attention import mlp_ranks, mlp_step
from atom.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from atom.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from atom.layers.norm import RMSNorm
from atom.layers.model_context import ModelContext
from atom.layers.rotary import RotaryEmbedding, partial_rotary_factor, rope_params


def head_dim_of(hf: Any) -> int:
    return getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads


class LlamaAttention(nn.Module):
    qk_norm = False

    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, qkv_bias: bool,
                 o_bias: bool) -> None:
        super().__init__()
        n = mc.parallel.tp_size
        self.head_dim = head_dim_of(hf)
        self.num_heads = hf.num_attention_heads // n
        # Fewer KV heads than ranks: each rank keeps one, replicated on n / kv_heads ranks.
        self.num_kv_heads = max(1, hf.num_key_value_heads // n)
        self.qkv_proj = QKVParallelLinear(mc, hf.hidden_size, self.head_dim, hf.num_attention_heads,
                                          hf.num_key_value_heads, bias=qkv_bias)
        self.o_proj = RowParallelLinear(mc, hf.num_attention_heads * self.head_dim,
                                        hf.hidden_size, bias=o_bias)
        theta, scaling = rope_params(hf)
        rot = int(self.head_dim * partial_rotary_factor(hf))
        self.rotary_emb = RotaryEmbedding(self.head_dim, rot, hf.max_position_embeddings, theta,
                                          scaling, is_neox=True)
        self.attn = PagedAttention(mc, self.num_heads, self.head_dim, self.num_kv_heads,
                                   self.head_dim ** -0.5, layer_idx)
        if self.qk_norm:
            self.q_norm = RMSNorm(mc, self.head_dim, hf.rms_norm_eps)
            self.k_norm = RMSNorm(mc, self.head_dim, hf.rms_norm_eps)

    def forward(self, positions: torch.Tensor, qkv: torch.Tensor) -> torch.Tensor:
        """Everything after the qkv projection, which the decoder layer runs together with its
        input norm (RMSNorm.project)."""
        hk = self.num_kv_heads
        # Heads first, then one split: the same [T, H, D] views as three reshapes of a split,
        # in two ops instead of four (each a few us on the CPU).
        q, k, v = qkv.reshape(-1, self.num_heads + 2 * hk, self.head_dim).split(
            [self.num_heads, hk, hk], dim=1)
        rope = self.rotary_emb
        if self.qk_norm:
            out = self.attn(q, k, v, positions, rope.cos_sin_cache, rope.is_neox,
                            self.q_norm.weight, self.k_norm.weight, self.q_norm.eps)
        else:
            out = self.attn(q, k, v, positions, rope.cos_sin_cache, rope.is_neox)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, mc: ModelContext, hidden: int, intermediate: int,
                 act: str = "silu", reduce_results: bool = True) -> None:
        super().__init__()
        if act != "silu":
            raise NotImplementedError(f"hidden_act {act!r} is not implemented")
        self.gate_up_proj = MergedColumnParallelLinear(mc, hidden, [intermediate, intermediate])
        self.down_proj = RowParallelLinear(mc, intermediate, hidden, reduce_results=reduce_results)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_up_proj(x), silu_gate=True)

    def normed_forward(self, norm: RMSNorm, x: torch.Tensor,
                       residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(MLP(norm(x + residual)), x + residual), the norm fused into gate_up where it can."""
        gate_up, residual = norm.project(x, residual, self.gate_up_proj)
        return self.down_proj(gate_up, silu_gate=True), residual


class LlamaDecoderLayer(nn.Module):
    attention_cls = LlamaAttention

    def __init__(self, mc: ModelContext, hf: Any, layer_idx: int, qkv_bias: bool,
                 o_bias: bool) -> None:
        super().__init__()
        self.self_attn = self.attention_cls(mc.attention_context(), hf, layer_idx, qkv_bias,
                                            o_bias)
        self.mlp = self.make_mlp(mc, hf, layer_idx)
        self.mlp_ranks = mlp_ranks(mc)
        self.input_layernorm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)

    def make_mlp(self, mc: ModelContext, hf: Any, layer_idx: int) -> nn.Module:
        return LlamaMLP(mc, hf.hidden_size, hf.intermediate_size,
                        getattr(hf, "hidden_act", "silu"), reduce_results=not mc.dp_attention)

    def forward(self, positions: torch.Tensor, x: torch.Tensor,
                residual: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        qkv, residual = self.input_layernorm.project(x, residual, self.self_attn.qkv_proj)
        x = self.self_attn(positions, qkv)
        return mlp_step(self.mlp, self.post_attention_layernorm, x, residual, self.mlp_ranks)


class LlamaModel(nn.Module):
    layer_cls = LlamaDecoderLayer

    def __init__(self, mc: ModelContext, hf: Any, qkv_bias: bool, o_bias: bool) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(mc.attention_context(), hf.vocab_size,
                                                   hf.hidden_size)
        self.layers = self.make_layers(mc, hf, qkv_bias, o_bias)
        self.norm = RMSNorm(mc, hf.hidden_size, hf.rms_norm_eps)

    def make_layers(self, mc: ModelContext, hf: Any, qkv_bias: bool,
                    o_bias: bool) -> nn.ModuleList:
        return nn.ModuleList(self.layer_cls(mc, hf, i, qkv_bias, o_bias)
                             for i in range(hf.num_hidden_layers))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            x, residual = layer(positions, x, residual)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(nn.Module):
    model_cls = LlamaModel
    packed_modules_mapping = {
        "q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, hf: Any, mc: ModelContext) -> None:
        super().__init__()
        self.hf_config = hf
        # What every layer was built with: whoever steps the model puts each forward's context
        # into context.forward.
        self.context = mc
        bias = bool(getattr(hf, "attention_bias", False))
        qkv_bias, o_bias = self.attention_biases(hf, bias)
        self.model = self.model_cls(mc, hf, qkv_bias, o_bias)
        self.lm_head = ParallelLMHead(mc.attention_context(), hf.vocab_size, hf.hidden_size)
        if getattr(hf, "tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    @staticmethod
    def attention_biases(hf: Any, bias: bool) -> tuple[bool, bool]:
        return bias, bias

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
