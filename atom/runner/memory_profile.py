"""What GPU memory the KV cache may take: measured after the weights and one profiling forward.

The forward runs the largest batch a step may hold (scheduler.max_num_batched_tokens, at most
max_model_len) over a throwaway cache, so its peak activations are counted against
kv_cache.gpu_memory_utilization before the real cache is sized.
"""
from __future__ import annotations

from typing import Callable

import torch

from atom.kernels.metadata import AttentionMetadata
from atom.layers.forward_context import ForwardContext, ForwardSlot
from atom.runner.kv_cache import KVCacheSpec, allocate

ProfileStep = Callable[[torch.Tensor, torch.Tensor], None]  # (ids, positions): forward + logits


def kv_budget_bytes(step: ProfileStep, slot: ForwardSlot, spec: KVCacheSpec, tokens: int,
                    utilization: float, device: torch.device) -> int:
    """Bytes left for the KV cache under `utilization` of the GPU's memory."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    _profile_forward(step, slot, spec, tokens, device)
    free, total = torch.cuda.mem_get_info()
    peak = torch.cuda.max_memory_allocated()
    others = total - free - torch.cuda.memory_reserved()  # other processes on this GPU
    return int(total * utilization - peak - others)


def _profile_forward(step: ProfileStep, slot: ForwardSlot, spec: KVCacheSpec, n: int,
                     device: torch.device) -> None:
    """Inputs are made outside inference mode, like every later step's: a compiled forward
    guards on it, and inference tensors here would cost a recompile later."""
    blocks = -(-n // spec.block_size)
    _, caches, scales = allocate(spec, blocks, device)
    ids = torch.zeros(n, dtype=torch.long, device=device)
    pos = torch.arange(n, device=device)
    meta = AttentionMetadata(
        cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32, device=device),
        context_lens=torch.tensor([n], dtype=torch.int32, device=device),
        block_tables=torch.arange(blocks, dtype=torch.int32, device=device).unsqueeze(0),
        slot_mapping=torch.arange(n, device=device), max_q_len=n, max_context_len=n,
        is_decode=False, q_lens_cpu=[n], context_lens_cpu=[n])
    with torch.inference_mode(), slot.using(ForwardContext(meta, caches, scales)):
        step(ids, pos)
    del caches
    torch.cuda.synchronize()
