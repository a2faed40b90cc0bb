"""KV-cache sizing and allocation, from the specs the model's attention layers declare.

Each attention layer says what it keeps per token (atom/layers/kv_spec.py): full attention keeps
K and V pages of its KV heads; MLA keeps one latent vector. The builder sizes the block pool
from the sum over layers and allocates one tensor per group of layers with the same spec, sliced
per layer, so a block id means the same token slots in every layer.

bf16 means "the model's activation dtype" (bfloat16 on GPU; float32 on CPU, where the torch
reference runs in float32 so the transformers oracle can be matched); fp8 stores e4m3 with a
per-tensor scale per layer for K and one for V: an fp8 checkpoint's calibrated k_scale / v_scale
(atom/loader/kv_scales.py) where it has them, else 1.0.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from atom.config.errors import ConfigError
from atom.config.schema import KVCacheConfig
from atom.layers.kv_spec import LayerKVSpec

log = logging.getLogger("atom.runner")


@dataclass(frozen=True)
class KVCacheSpec:
    """Every layer's spec and the block size: what the pool is sized and allocated from."""

    layers: tuple[LayerKVSpec, ...]
    block_size: int

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * sum(s.bytes_per_token for s in self.layers)

    @property
    def dtype(self) -> torch.dtype:
        return self.layers[0].dtype


def model_kv_spec(model: nn.Module, dtype: torch.dtype, block_size: int) -> KVCacheSpec:
    """The KV spec of every attention layer of the model, in layer order."""
    layers = sorted((m for m in model.modules() if hasattr(m, "kv_spec")),
                    key=lambda m: m.layer_idx)
    return KVCacheSpec(tuple(m.kv_spec(dtype) for m in layers), block_size)


@dataclass
class KVCache:
    """The allocated pool: `allocate`'s buffers, per-layer views and scales, and its size."""

    spec: KVCacheSpec
    num_blocks: int
    buffers: list[torch.Tensor]
    caches: list[tuple[torch.Tensor, ...]]
    scales: list[tuple[float, float]]


def kv_dtype(kv: KVCacheConfig, model_dtype: torch.dtype) -> torch.dtype:
    return torch.float8_e4m3fn if kv.dtype == "fp8" else model_dtype


def describe_kv_dtype(kv: KVCacheConfig, dtype: torch.dtype) -> str:
    """`kv_cache.dtype=bf16 (float32: the model's dtype on CPU)`: the config's name and what is
    stored, which differ on purpose (bf16 means the activation dtype)."""
    stored = str(dtype).removeprefix("torch.")
    if kv.dtype == "fp8":
        return f"kv_cache.dtype=fp8 ({stored}, per-tensor scale)"
    if stored == "bfloat16":
        return "kv_cache.dtype=bf16"
    return f"kv_cache.dtype=bf16 ({stored}: the model's activation dtype)"


def num_blocks_for(kv: KVCacheConfig, spec: KVCacheSpec, device: torch.device,
                   free_bytes: int | None, max_model_len: int) -> int:
    """kv_cache.num_blocks when set; else what the memory budget holds. A budget that cannot
    hold one sequence of max_model_len is refused here, at start-up: served, every long enough
    request would fail instead (and the engine once started with a single block)."""
    if kv.num_blocks is not None:
        return kv.num_blocks
    if device.type == "cpu" or free_bytes is None:
        blocks = kv.cpu_cache_bytes // spec.bytes_per_block
        if blocks * spec.block_size < max_model_len:
            raise ConfigError("kv_cache.cpu_cache_bytes", kv.cpu_cache_bytes,
                              f"holds {blocks * spec.block_size} tokens of KV cache, fewer than "
                              f"one sequence of model.max_model_len={max_model_len}: raise it, "
                              f"lower model.max_model_len, or set kv_cache.num_blocks")
        return blocks
    blocks = max(0, free_bytes // spec.bytes_per_block)
    if blocks * spec.block_size < max_model_len:
        raise ConfigError("kv_cache.gpu_memory_utilization", kv.gpu_memory_utilization,
                          f"after the weights and a profiling forward it leaves room for "
                          f"{blocks * spec.block_size} tokens of KV cache, fewer than one "
                          f"sequence of model.max_model_len={max_model_len}: raise it, lower "
                          f"model.max_model_len, or set kv_cache.num_blocks")
    return blocks


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeroed (a page's unwritten slots are read as zeros, masked). On the CPU the pages come
    from calloc, which the OS maps zeroed and commits as they are first written: torch.zeros
    writes every byte up front, 1.1 s and 2 GB resident for the default kv_cache.cpu_cache_bytes
    before the first token."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return torch.from_numpy(np.zeros(size, dtype=np.uint8)).view(dtype).view(shape)


def layer_scales(kv: KVCacheConfig, num_layers: int,
                 checkpoint: dict[int, tuple[float, float]]) -> list[tuple[float, float]]:
    """Each layer's (k_scale, v_scale): the checkpoint's with an fp8 cache (1.0 for a layer it
    does not scale); 1.0 with a float cache, which stores K and V as they are."""
    if checkpoint and kv.dtype != "fp8":
        log.info("the checkpoint's fp8 KV-cache scales (%d layers) are unused: kv_cache.dtype="
                 "%s stores K and V unscaled (kv_cache.dtype=fp8 would use them)",
                 len(checkpoint), kv.dtype)
        return [(1.0, 1.0)] * num_layers
    if checkpoint:
        ks, vs = zip(*checkpoint.values())
        log.info("fp8 KV cache scaled by the checkpoint's scales on %d of %d layers (k %.3g to "
                 "%.3g, v %.3g to %.3g)", len(checkpoint), num_layers, min(ks), max(ks),
                 min(vs), max(vs))
    return [checkpoint.get(i, (1.0, 1.0)) for i in range(num_layers)]


def allocate(spec: KVCacheSpec, num_blocks: int, device: torch.device,
             scales: list[tuple[float, float]] | None = None):
    """(buffers, caches, scales): one zeroed tensor per group of layers sharing a spec, each
    layer's cache as a tuple of views into it ((k, v) for full attention, (latent,) for MLA),
    and each layer's (k_scale, v_scale): `scales` (layer_scales), or 1.0."""
    groups: dict[LayerKVSpec, list[int]] = {}
    for i, s in enumerate(spec.layers):
        groups.setdefault(s, []).append(i)
    buffers, caches = [], [None] * spec.num_layers
    for s, layers in groups.items():
        full = _zeros((len(layers), *s.page_shape(num_blocks, spec.block_size)), s.dtype, device)
        buffers.append(full)
        for j, i in enumerate(layers):
            caches[i] = s.views(full[j])
    if scales is None:
        scales = [(1.0, 1.0)] * spec.num_layers
    elif len(scales) != spec.num_layers:
        raise ValueError(f"{len(scales)} layers' KV scales for {spec.num_layers} layers")
    return buffers, caches, list(scales)
