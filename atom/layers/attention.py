"""Attention over the paged KV cache: rotates q and k and stores this step's keys/values, then
attends.

The layer owns no cache; the runner hands every layer its slice through the forward context.
`forward` is the only place in the model that reads that context, so it can be wrapped whole as
one opaque op (torch.compile); everything else it needs comes in as tensors and python scalars.
Rotary (and Qwen3's q/k norm) happen here rather than in the model so that they and the cache
write are one kernel launch.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from atom.layers.attention_op import paged_attention
from atom.layers.kv_spec import FullAttentionSpec
from atom.layers.forward_context import backend, current


class PagedAttention(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, num_kv_heads: int, scale: float,
                 layer_idx: int, sliding_window: Optional[int] = None) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.num_kv_heads = num_heads, head_dim, num_kv_heads
        self.scale, self.layer_idx, self.sliding_window = scale, layer_idx, sliding_window

    def kv_spec(self, dtype: torch.dtype) -> FullAttentionSpec:
        return FullAttentionSpec(self.num_kv_heads, self.head_dim, dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                cos_sin_cache: torch.Tensor, is_neox: bool,
                q_norm_weight: Optional[torch.Tensor] = None,
                k_norm_weight: Optional[torch.Tensor] = None,
                norm_eps: float = 0.0) -> torch.Tensor:
        """q: [T, Hq, D], k/v: [T, Hk, D], before rotary; the norm weights [D] for models with
        per-head q/k RMSNorm (Qwen3) → [T, Hq*D]. No argument is written to. Under torch.compile
        the body runs as the opaque op of attention_op.py: traced, the per-step context it reads
        would recompile the model every step."""
        args = (q, k, v, positions, cos_sin_cache, is_neox, q_norm_weight, k_norm_weight, norm_eps)
        if torch.compiler.is_compiling():
            return paged_attention(*args, self.layer_idx)
        return self._forward_impl(*args)

    def _forward_impl(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      positions: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool,
                      q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor],
                      norm_eps: float) -> torch.Tensor:
        ctx = current()
        assert ctx is not None, "attention needs a forward context (set by the model runner)"
        k_cache, v_cache = ctx.kv_caches[self.layer_idx]
        k_scale, v_scale = ctx.kv_scales[self.layer_idx]
        be = backend()
        q = be.rope_store_kv(positions, q, k, v, k_cache, v_cache, ctx.meta.slot_mapping,
                             k_scale, v_scale, cos_sin_cache, is_neox, q_norm_weight,
                             k_norm_weight, norm_eps)
        out = be.attention(q, k_cache, v_cache, ctx.meta, self.scale, k_scale, v_scale,
                           self.sliding_window)
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)
