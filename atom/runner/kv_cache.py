"""KV-cache sizing and allocation: one tensor for all layers, sliced per layer.

bf16 means "the model's activation dtype" (bfloat16 on GPU; float32 on CPU, where the torch
reference runs in float32 so the transformers oracle can be matched); fp8 stores e4m3 with a
per-tensor scale per layer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from atom.config.schema import Config

log = logging.getLogger("atom.runner")


@dataclass
class KVLayout:
    num_layers: int
    num_kv_heads: int  # on this rank
    head_dim: int
    block_size: int
    dtype: torch.dtype

    @property
    def bytes_per_block(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.head_dim * elem


def kv_dtype(cfg: Config, model_dtype: torch.dtype) -> torch.dtype:
    return torch.float8_e4m3fn if cfg.kv_cache.dtype == "fp8" else model_dtype


def num_blocks_for(cfg: Config, layout: KVLayout, device: torch.device, free_bytes: int | None) -> int:
    if cfg.kv_cache.num_blocks is not None:
        return cfg.kv_cache.num_blocks
    budget = cfg.kv_cache.cpu_cache_bytes if device.type == "cpu" or free_bytes is None else free_bytes
    return max(1, budget // layout.bytes_per_block)


def allocate(layout: KVLayout, num_blocks: int, device: torch.device):
    """(caches, scales): per-layer (k_cache, v_cache) views into one allocation, and scales."""
    full = torch.zeros(layout.num_layers, 2, num_blocks, layout.block_size, layout.num_kv_heads,
                       layout.head_dim, dtype=layout.dtype, device=device)
    caches = [(full[i, 0], full[i, 1]) for i in range(layout.num_layers)]
    scales = [(1.0, 1.0) for _ in range(layout.num_layers)]
    return full, caches, scales
