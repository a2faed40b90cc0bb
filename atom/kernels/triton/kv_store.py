"""Write the step's new k/v into the paged cache, quantising to fp8 e4m3 on the way when asked.

Fusing the quantisation into the scatter means the fp8 cache costs no extra pass: the bf16 k/v are
read once and one byte per element is written.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8_MAX = tl.constexpr(448.0)  # largest finite e4m3


@triton.jit
def store_cache(cache_ptr, offsets, x, scale, mask, QUANT: tl.constexpr):
    """Write activations into a cache of the model dtype, or of fp8 e4m3 as x / scale."""
    if QUANT:
        x = tl.clamp(x.to(tl.float32) / scale, -FP8_MAX, FP8_MAX)
    tl.store(cache_ptr + offsets, x.to(cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _store_kv_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, k_tok_stride, v_tok_stride,
                     k_head_stride, v_head_stride, c_slot_stride, c_head_stride, n_heads, head_dim,
                     k_scale, v_scale, QUANT: tl.constexpr, HEADS: tl.constexpr,
                     DIM: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot >= 0:
        h = tl.arange(0, HEADS)[:, None]
        d = tl.arange(0, DIM)[None, :]
        mask = (h < n_heads) & (d < head_dim)
        k = tl.load(k_ptr + tok * k_tok_stride + h * k_head_stride + d, mask=mask, other=0.0)
        v = tl.load(v_ptr + tok * v_tok_stride + h * v_head_stride + d, mask=mask, other=0.0)
        dst = slot * c_slot_stride + h * c_head_stride + d
        store_cache(kc_ptr, dst, k, k_scale, mask, QUANT)
        store_cache(vc_ptr, dst, v, v_scale, mask, QUANT)


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor, k_scale: float, v_scale: float) -> None:
    """k, v: [T, Hk, D]; caches [num_blocks, block_size, Hk, D]; slot -1 = skip (padding)."""
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    assert k_cache.stride() == v_cache.stride()
    n_tok = slot_mapping.shape[0]
    if n_tok == 0:
        return
    n_heads, head_dim = k.shape[1], k.shape[2]
    quant = k_cache.dtype == torch.float8_e4m3fn
    _store_kv_kernel[(n_tok,)](
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), v.stride(0), k.stride(1), v.stride(1),
        k_cache.stride(1), k_cache.stride(2), n_heads, head_dim, float(k_scale), float(v_scale),
        QUANT=quant, HEADS=triton.next_power_of_2(n_heads), DIM=triton.next_power_of_2(head_dim),
        num_warps=4)
