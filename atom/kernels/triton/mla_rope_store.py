"""MLA's step between the projections and attention in one launch: rotary on every head's q_pe
and on the shared k_pe, and [kv_c | rotated k_pe] written into the paged latent cache at each
token's slot (-1 = padding, skipped), quantised to fp8 e4m3 when the cache is.

The torch reference selects the kept slots with a boolean mask, which reads the mask's count back
to the host: no CUDA graph can capture it. One program per token needs no count. Rounding
follows the reference: the rotated values are rounded to the activation dtype, and only then
divided by the fp8 scale. q_pe goes to a new tensor (the reference writes no input either).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.kv_store import store_cache
from atom.kernels.triton.pdl import pdl_args, pdl_wait
from atom.kernels.triton.rotary import cos_sin_at, pair_offsets


@triton.jit
def _mla_rope_store_kernel(pos_ptr, slot_ptr, q_ptr, k_ptr, kv_ptr, qo_ptr, c_ptr, cs_ptr,
                           q_tok_stride, q_head_stride, k_tok_stride, kv_tok_stride,
                           c_slot_stride, cs_stride, n_heads, half, lora, kv_scale,
                           IS_NEOX: tl.constexpr, QUANT: tl.constexpr, HEADS: tl.constexpr,
                           HALF: tl.constexpr, LORA: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    i, cmask, cos, sin = cos_sin_at(cs_ptr, pos, cs_stride, half, HALF)
    off1, off2 = pair_offsets(i, half, IS_NEOX)

    h = tl.arange(0, HEADS)[:, None]
    q_mask = (h < n_heads) & cmask
    q_row = q_ptr + tok * q_tok_stride + h * q_head_stride
    q1 = tl.load(q_row + off1, mask=q_mask, other=0.0).to(tl.float32)
    q2 = tl.load(q_row + off2, mask=q_mask, other=0.0).to(tl.float32)
    qo_row = qo_ptr + tok * (n_heads * 2 * half) + h * (2 * half)
    tl.store(qo_row + off1, (q1 * cos - q2 * sin).to(qo_ptr.dtype.element_ty), mask=q_mask)
    tl.store(qo_row + off2, (q2 * cos + q1 * sin).to(qo_ptr.dtype.element_ty), mask=q_mask)

    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot >= 0:
        dst = slot * c_slot_stride
        col = tl.arange(0, LORA)
        kv = tl.load(kv_ptr + tok * kv_tok_stride + col, mask=col < lora, other=0.0)
        store_cache(c_ptr, dst + col, kv, kv_scale, col < lora, QUANT)
        k1 = tl.load(k_ptr + tok * k_tok_stride + off1, mask=cmask, other=0.0).to(tl.float32)
        k2 = tl.load(k_ptr + tok * k_tok_stride + off2, mask=cmask, other=0.0).to(tl.float32)
        act = k_ptr.dtype.element_ty
        store_cache(c_ptr, dst + lora + off1, (k1 * cos - k2 * sin).to(act), kv_scale, cmask,
                    QUANT)
        store_cache(c_ptr, dst + lora + off2, (k2 * cos + k1 * sin).to(act), kv_scale, cmask,
                    QUANT)


def mla_rope_store(positions: torch.Tensor, q_pe: torch.Tensor, k_pe: torch.Tensor,
                   kv_c: torch.Tensor, latent_cache: torch.Tensor, slot_mapping: torch.Tensor,
                   kv_scale: float, cos_sin_cache: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """q_pe [T, H, R], k_pe [T, R], kv_c [T, L] (last dims contiguous, any token/head strides);
    latent_cache [num_blocks, block_size, L + R]; rot_dim == R. Returns the rotated q_pe, a new
    contiguous [T, H, R]."""
    assert q_pe.stride(-1) == 1 and k_pe.stride(-1) == 1 and kv_c.stride(-1) == 1
    assert latent_cache.is_contiguous() and cos_sin_cache.stride(-1) == 1
    half = cos_sin_cache.shape[-1] // 2
    assert 2 * half == q_pe.shape[-1] == k_pe.shape[-1], "needs rot_dim == qk_rope_head_dim"
    q_out = torch.empty(q_pe.shape, dtype=q_pe.dtype, device=q_pe.device)
    n_tok, n_heads, lora = q_pe.shape[0], q_pe.shape[1], kv_c.shape[-1]
    if n_tok == 0:
        return q_out
    _mla_rope_store_kernel[(n_tok,)](
        positions, slot_mapping, q_pe, k_pe, kv_c, q_out, latent_cache, cos_sin_cache,
        q_pe.stride(0), q_pe.stride(1), k_pe.stride(0), kv_c.stride(0), latent_cache.stride(1),
        cos_sin_cache.stride(0), n_heads, half, lora, float(kv_scale), IS_NEOX=is_neox,
        QUANT=latent_cache.dtype == torch.float8_e4m3fn,
        HEADS=triton.next_power_of_2(n_heads), HALF=triton.next_power_of_2(half),
        LORA=triton.next_power_of_2(lora), num_warps=4, **pdl_args(q_pe.device))
    return q_out
