"""KV-cache sizing and allocation: one tensor for all layers, sliced per layer.

bf16 means "the model's activation dtype" (bfloat16 on GPU; float32 on CPU, where the torch
reference runs in float32 so the transformers oracle can be matched); fp8 stores e4m3 with a
per-tensor scale per layer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from atom.config.errors import ConfigError
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


def describe_kv_dtype(cfg: Config, dtype: torch.dtype) -> str:
    """`kv_cache.dtype=bf16 (float32: the model's dtype on CPU)`: the config's name and what is
    stored, which differ on purpose (bf16 means the activation dtype)."""
    stored = str(dtype).removeprefix("torch.")
    if cfg.kv_cache.dtype == "fp8":
        return f"kv_cache.dtype=fp8 ({stored}, per-tensor scale)"
    if stored == "bfloat16":
        return "kv_cache.dtype=bf16"
    return f"kv_cache.dtype=bf16 ({stored}: the model's activation dtype)"


def num_blocks_for(cfg: Config, layout: KVLayout, device: torch.device, free_bytes: int | None,
                   max_model_len: int) -> int:
    """kv_cache.num_blocks when set; else what the memory budget holds. A GPU budget that cannot
    hold one sequence of max_model_len is refused here, at start-up: served, every long enough
    request would fail instead (and the engine once started with a single block)."""
    if cfg.kv_cache.num_blocks is not None:
        return cfg.kv_cache.num_blocks
    if device.type == "cpu" or free_bytes is None:
        return max(1, cfg.kv_cache.cpu_cache_bytes // layout.bytes_per_block)
    blocks = max(0, free_bytes // layout.bytes_per_block)
    if blocks * layout.block_size < max_model_len:
        raise ConfigError("kv_cache.gpu_memory_utilization", cfg.kv_cache.gpu_memory_utilization,
                          f"after the weights and a profiling forward it leaves room for "
                          f"{blocks * layout.block_size} tokens of KV cache, fewer than one "
                          f"sequence of model.max_model_len={max_model_len}: raise it, lower "
                          f"model.max_model_len, or set kv_cache.num_blocks")
    return blocks


def allocate(layout: KVLayout, num_blocks: int, device: torch.device):
    """(caches, scales): per-layer (k_cache, v_cache) views into one allocation, and scales."""
    full = torch.zeros(layout.num_layers, 2, num_blocks, layout.block_size, layout.num_kv_heads,
                       layout.head_dim, dtype=layout.dtype, device=device)
    caches = [(full[i, 0], full[i, 1]) for i in range(layout.num_layers)]
    scales = [(1.0, 1.0) for _ in range(layout.num_layers)]
    return full, caches, scales
