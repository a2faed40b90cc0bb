"""Attention over the paged KV cache: rotates q and k and stores this step's keys/values, then
attends.

The layer owns no cache; the runner puts every layer's slice into the forward slot the model was
built with. `forward` is the only place in the model that reads that slot, so it can be wrapped
whole as one opaque op (torch.compile); everything else it needs comes in as tensors and python
scalars.
Rotary (and Qwen3's q/k norm) happen here rather than in the model so that they and the cache
write are one kernel launch.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from atom.layers.kv_spec import FullAttentionSpec
from atom.layers.model_context import ModelContext


class PagedAttention(nn.Module):
    def __init__(self, mc: ModelContext, num_heads: int, head_dim: int, num_kv_heads: int,
                 scale: float, layer_idx: int, sliding_window: Optional[int] = None) -> None:
        super().__init__()
        self.backend, self.slot = mc.backend, mc.forward
        # The model's own attention op (attention_op.model_attention_op), set when its forward
        # is compiled.
        self.compiled_op: Optional[Callable[..., torch.Tensor]] = None
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
        the body runs as the model's opaque op (attention_op.py): traced, the per-step context
        it reads would recompile the model every step."""
        args = (q, k, v, positions, cos_sin_cache, is_neox, q_norm_weight, k_norm_weight, norm_eps)
        if torch.compiler.is_compiling():
            if self.compiled_op is None:
                raise RuntimeError("a compiled attention layer needs its model's op "
                                   "(atom.runner.compile.CompiledForward binds it)")
            return self.compiled_op(*args, self.layer_idx)
        return self._forward_impl(*args)

    def _forward_impl(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      positions: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool,
                      q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor],
                      norm_eps: float) -> torch.Tensor:
        ctx = self.slot.current()
        k_cache, v_cache = ctx.kv_caches[self.layer_idx]
        k_scale, v_scale = ctx.kv_scales[self.layer_idx]
        be = self.backend
        q = be.rope_store_kv(positions, q, k, v, k_cache, v_cache, ctx.meta.slot_mapping,
                             k_scale, v_scale, cos_sin_cache, is_neox, q_norm_weight,
                             k_norm_weight, norm_eps)
        out = be.attention(q, k_cache, v_cache, ctx.meta, self.scale, k_scale, v_scale,
                           self.sliding_window)
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)
