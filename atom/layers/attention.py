"""Attention over the paged KV cache: stores this step's keys/values, then attends.

The layer owns no cache; the runner hands every layer its slice through the forward context.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from atom.layers.attention_op import paged_attention
from atom.runner.forward_context import backend, current


class PagedAttention(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, num_kv_heads: int, scale: float,
                 layer_idx: int, sliding_window: Optional[int] = None) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.num_kv_heads = num_heads, head_dim, num_kv_heads
        self.scale, self.layer_idx, self.sliding_window = scale, layer_idx, sliding_window

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, Hq, D], k/v: [T, Hk, D] → [T, Hq*D]. Under torch.compile the body is one opaque
        op (attention_op.py): traced, its per-step context would recompile every step."""
        if torch.compiler.is_compiling():
            return paged_attention(q, k, v, self.layer_idx)
        return self._forward_impl(q, k, v)

    def _forward_impl(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ctx = current()
        assert ctx is not None, "attention needs a forward context (set by the model runner)"
        k_cache, v_cache = ctx.kv_caches[self.layer_idx]
        k_scale, v_scale = ctx.kv_scales[self.layer_idx]
        be = backend()
        be.store_kv(k, v, k_cache, v_cache, ctx.meta.slot_mapping, k_scale, v_scale)
        out = be.attention(q, k_cache, v_cache, ctx.meta, self.scale, k_scale, v_scale,
                           self.sliding_window)
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)
