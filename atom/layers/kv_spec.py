"""What one attention layer keeps in the paged KV cache per token: its KV spec.

Declared by the layer (`kv_spec(dtype)`), read by the runner, which sizes the block pool from the
sum over layers and allocates one tensor per group of equal specs (atom/runner/kv_cache.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch


def _elem(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class FullAttentionSpec:
    """K and V pages: [num_blocks, block_size, num_kv_heads, head_dim] each, per layer."""

    num_kv_heads: int  # on this rank
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * _elem(self.dtype)

    def page_shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        return (2, num_blocks, block_size, self.num_kv_heads, self.head_dim)

    def views(self, layer: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return layer[0], layer[1]


@dataclass(frozen=True)
class MLASpec:
    """One latent vector per token ([num_blocks, block_size, latent_dim] per layer): DeepSeek's
    kv_lora_rank compressed KV plus the shared rotary key (512 + 64 for R1)."""

    latent_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        return self.latent_dim * _elem(self.dtype)

    def page_shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        return (num_blocks, block_size, self.latent_dim)

    def views(self, layer: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (layer,)


LayerKVSpec = Union[FullAttentionSpec, MLASpec]
