"""Rotary on q and k (after Qwen3's per-head q/k RMSNorm when asked) and the KV-cache write, in
one launch.

At batch-1 decode a small model is launch-bound (Qwen3-0.6B: 28 layers x ~11 kernels made up
most of a 1.04 ms graph replay), and qk-norm, rotary and the cache write were up to three of
them. One program per token normalises and rotates all its q and k heads, writes q to a new
tensor, and writes the rotated k and the v straight into the paged cache at the token's slot
(-1 = padding, skipped), quantised to fp8 e4m3 when the cache is. No input is written: a wrapper
op for torch.compile then mutates nothing but the caches, and k needs no write-back because
attention reads keys from the cache.

Rounding follows the unfused ops bit for bit: the normalised value and the rotated value are each
rounded to the activation dtype, and only then divided by the fp8 scale. Full-width rotary only
(rot_dim == head_dim); the backend composes the unfused ops otherwise.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from atom.kernels.triton.kv_store import store_cache
from atom.kernels.triton.pdl import pdl_args, pdl_wait
from atom.kernels.triton.rotary import cos_sin_at, pair_offsets


@triton.jit
def _rope_heads(ptr, heads_off, w_ptr, off1, off2, mask, cmask, cos, sin, half, eps,
                QK_NORM: tl.constexpr):
    """The two rotated halves of every head at `heads_off`, each rounded to the activation
    dtype as the unfused norm and rotary round them."""
    x1 = tl.load(ptr + heads_off + off1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(ptr + heads_off + off2, mask=mask, other=0.0).to(tl.float32)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / (2 * half) + eps)
        w1 = tl.load(w_ptr + off1, mask=cmask, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + off2, mask=cmask, other=0.0).to(tl.float32)
        x1 = (x1 * rstd[:, None] * w1).to(ptr.dtype.element_ty).to(tl.float32)
        x2 = (x2 * rstd[:, None] * w2).to(ptr.dtype.element_ty).to(tl.float32)
    o1 = (x1 * cos - x2 * sin).to(ptr.dtype.element_ty)
    o2 = (x2 * cos + x1 * sin).to(ptr.dtype.element_ty)
    return o1, o2


@triton.jit
def _rope_store_kv_kernel(pos_ptr, slot_ptr, q_ptr, k_ptr, v_ptr, qo_ptr, kc_ptr, vc_ptr, qw_ptr,
                          kw_ptr, cs_ptr, q_tok_stride, q_head_stride, k_tok_stride, k_head_stride,
                          v_tok_stride, v_head_stride, c_slot_stride, c_head_stride, cs_stride,
                          n_q_heads, n_kv_heads, half, eps, k_scale, v_scale,
                          QK_NORM: tl.constexpr, IS_NEOX: tl.constexpr, QUANT: tl.constexpr,
                          Q_HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HALF: tl.constexpr,
                          PDL: tl.constexpr):
    pdl_wait(PDL)
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    i, cmask, cos, sin = cos_sin_at(cs_ptr, pos, cs_stride, half, HALF)
    off1, off2 = pair_offsets(i, half, IS_NEOX)

    hq = tl.arange(0, Q_HEADS)[:, None]
    q_mask = (hq < n_q_heads) & cmask
    q_off = tok * q_tok_stride + hq * q_head_stride
    q1, q2 = _rope_heads(q_ptr, q_off, qw_ptr, off1, off2, q_mask, cmask, cos, sin, half, eps,
                         QK_NORM)
    qo_off = tok * (n_q_heads * 2 * half) + hq * (2 * half)
    tl.store(qo_ptr + qo_off + off1, q1, mask=q_mask)
    tl.store(qo_ptr + qo_off + off2, q2, mask=q_mask)

    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot >= 0:
        hk = tl.arange(0, KV_HEADS)[:, None]
        kv_mask = (hk < n_kv_heads) & cmask
        dst = slot * c_slot_stride + hk * c_head_stride
        k1, k2 = _rope_heads(k_ptr, tok * k_tok_stride + hk * k_head_stride, kw_ptr, off1, off2,
                             kv_mask, cmask, cos, sin, half, eps, QK_NORM)
        store_cache(kc_ptr, dst + off1, k1, k_scale, kv_mask, QUANT)
        store_cache(kc_ptr, dst + off2, k2, k_scale, kv_mask, QUANT)
        # v is copied as two contiguous halves, whatever the rotary layout.
        v_off = tok * v_tok_stride + hk * v_head_stride
        v1 = tl.load(v_ptr + v_off + i, mask=kv_mask, other=0.0)
        v2 = tl.load(v_ptr + v_off + half + i, mask=kv_mask, other=0.0)
        store_cache(vc_ptr, dst + i, v1, v_scale, kv_mask, QUANT)
        store_cache(vc_ptr, dst + half + i, v2, v_scale, kv_mask, QUANT)


def rope_store_kv(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                  k_scale: float, v_scale: float, cos_sin_cache: torch.Tensor, is_neox: bool,
                  q_norm_weight: Optional[torch.Tensor] = None,
                  k_norm_weight: Optional[torch.Tensor] = None,
                  norm_eps: float = 0.0) -> torch.Tensor:
    """q: [T, Hq, D], k/v: [T, Hk, D] (last dim contiguous, any token/head strides); caches
    [num_blocks, block_size, Hk, D]; norm weights [D] or both None. Returns the rotated q, a
    new contiguous [T, Hq, D]."""
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    assert cos_sin_cache.stride(-1) == 1
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    assert k_cache.stride() == v_cache.stride()
    half = cos_sin_cache.shape[-1] // 2
    assert 2 * half == q.shape[-1], "fused rotary + KV store needs rot_dim == head_dim"
    qk_norm = q_norm_weight is not None
    assert qk_norm == (k_norm_weight is not None)
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] == 0:
        return q_out
    _rope_store_kv_kernel[(q.shape[0],)](
        positions, slot_mapping, q, k, v, q_out, k_cache, v_cache,
        q_norm_weight if qk_norm else q, k_norm_weight if qk_norm else k, cos_sin_cache,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(1), k_cache.stride(2), cos_sin_cache.stride(0), q.shape[1], k.shape[1],
        half, float(norm_eps), float(k_scale), float(v_scale), QK_NORM=qk_norm, IS_NEOX=is_neox,
        QUANT=k_cache.dtype == torch.float8_e4m3fn, Q_HEADS=triton.next_power_of_2(q.shape[1]),
        KV_HEADS=triton.next_power_of_2(k.shape[1]), HALF=triton.next_power_of_2(half),
        num_warps=4, **pdl_args(q.device))
    return q_out
