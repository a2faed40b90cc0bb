"""Per-head RMSNorm of q and k followed by rotary, in place, in one launch (Qwen3's attention).

Qwen3 normalises every q and k head before rotary; done as three ops that is three launches per
layer (two of them copying, because q and k are strided views of the qkv output). At batch-1
decode the 0.6B model is launch-bound (run 3: ~13 kernels x 28 layers make up most of its 1.45 ms
step), so one program per token here normalises and rotates all its heads. Rounding follows the
unfused ops: the normalised value is rounded to the activation dtype before it is rotated.
Full-width rotary only (rot_dim == head_dim), which is what Qwen3 uses.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.rotary import pair_offsets


@triton.jit
def _norm_rotate_heads(ptr, w_ptr, tok, tok_stride, head_stride, n_heads, cos, sin, half, eps,
                       IS_NEOX: tl.constexpr, HEADS: tl.constexpr, HALF: tl.constexpr):
    h = tl.arange(0, HEADS)[:, None]
    i = tl.arange(0, HALF)[None, :]
    mask = (h < n_heads) & (i < half)
    base = ptr + tok * tok_stride + h * head_stride
    off1, off2 = pair_offsets(i, half, IS_NEOX)
    x1 = tl.load(base + off1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + off2, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / (2 * half) + eps)
    w1 = tl.load(w_ptr + off1, mask=i < half, other=0.0).to(tl.float32)
    w2 = tl.load(w_ptr + off2, mask=i < half, other=0.0).to(tl.float32)
    n1 = (x1 * rstd[:, None] * w1).to(ptr.dtype.element_ty).to(tl.float32)
    n2 = (x2 * rstd[:, None] * w2).to(ptr.dtype.element_ty).to(tl.float32)
    tl.store(base + off1, (n1 * cos - n2 * sin).to(ptr.dtype.element_ty), mask=mask)
    tl.store(base + off2, (n2 * cos + n1 * sin).to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _qk_norm_rotary_kernel(pos_ptr, q_ptr, k_ptr, qw_ptr, kw_ptr, cs_ptr, q_tok_stride,
                           q_head_stride, k_tok_stride, k_head_stride, cs_stride, n_q_heads,
                           n_k_heads, half, eps, IS_NEOX: tl.constexpr, Q_HEADS: tl.constexpr,
                           K_HEADS: tl.constexpr, HALF: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    i = tl.arange(0, HALF)[None, :]
    cmask = i < half
    cos = tl.load(cs_ptr + pos * cs_stride + i, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(cs_ptr + pos * cs_stride + half + i, mask=cmask, other=0.0).to(tl.float32)
    _norm_rotate_heads(q_ptr, qw_ptr, tok, q_tok_stride, q_head_stride, n_q_heads, cos, sin, half,
                       eps, IS_NEOX, Q_HEADS, HALF)
    _norm_rotate_heads(k_ptr, kw_ptr, tok, k_tok_stride, k_head_stride, n_k_heads, cos, sin, half,
                       eps, IS_NEOX, K_HEADS, HALF)


def qk_norm_rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                   q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                   cos_sin_cache: torch.Tensor, is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [T, Hq, D], k: [T, Hk, D] (last dim contiguous, any token/head strides), weights [D];
    rotary over all of D. Returns q and k, changed in place."""
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos_sin_cache.stride(-1) == 1
    half = cos_sin_cache.shape[-1] // 2
    assert 2 * half == q.shape[-1], "fused qk-norm + rotary needs rot_dim == head_dim"
    if q.shape[0] > 0:
        _qk_norm_rotary_kernel[(q.shape[0],)](
            positions, q, k, q_weight, k_weight, cos_sin_cache, q.stride(0), q.stride(1),
            k.stride(0), k.stride(1), cos_sin_cache.stride(0), q.shape[1], k.shape[1], half, eps,
            IS_NEOX=is_neox, Q_HEADS=triton.next_power_of_2(q.shape[1]),
            K_HEADS=triton.next_power_of_2(k.shape[1]), HALF=triton.next_power_of_2(half),
            num_warps=4)
    return q, k
