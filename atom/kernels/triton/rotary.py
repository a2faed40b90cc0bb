"""Rotary position embedding, neox (split halves) and gptj (interleaved pairs), in place on q and k.

In place because q and k are usually views into the fused qkv projection output: rotating them
there saves a write and a read of both. One program per token rotates every head of q and k, so
the cos/sin row is loaded once per token.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def pair_offsets(i, half, IS_NEOX: tl.constexpr):
    """Offsets of the two elements rotary turns together: split halves (neox) or adjacent
    pairs (gptj)."""
    if IS_NEOX:
        return i, i + half
    return 2 * i, 2 * i + 1


@triton.jit
def cos_sin_at(cs_ptr, pos, cs_stride, half, HALF: tl.constexpr):
    """(column index [1, HALF], its mask, cos, sin) of one position's row of the cache."""
    i = tl.arange(0, HALF)[None, :]
    cmask = i < half
    cos = tl.load(cs_ptr + pos * cs_stride + i, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(cs_ptr + pos * cs_stride + half + i, mask=cmask, other=0.0).to(tl.float32)
    return i, cmask, cos, sin


@triton.jit
def _rotate_heads(ptr, tok, tok_stride, head_stride, n_heads, cos, sin, half,
                  IS_NEOX: tl.constexpr, HEADS: tl.constexpr, HALF: tl.constexpr):
    h = tl.arange(0, HEADS)[:, None]
    i = tl.arange(0, HALF)[None, :]
    mask = (h < n_heads) & (i < half)
    base = ptr + tok * tok_stride + h * head_stride
    off1, off2 = pair_offsets(i, half, IS_NEOX)
    x1 = tl.load(base + off1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + off2, mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    tl.store(base + off1, o1.to(ptr.dtype.element_ty), mask=mask)
    tl.store(base + off2, o2.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(pos_ptr, q_ptr, k_ptr, cs_ptr, q_tok_stride, q_head_stride, k_tok_stride,
                   k_head_stride, cs_stride, n_q_heads, n_k_heads, half,
                   IS_NEOX: tl.constexpr, Q_HEADS: tl.constexpr, K_HEADS: tl.constexpr,
                   HALF: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    _, _, cos, sin = cos_sin_at(cs_ptr, pos, cs_stride, half, HALF)
    _rotate_heads(q_ptr, tok, q_tok_stride, q_head_stride, n_q_heads, cos, sin, half,
                  IS_NEOX, Q_HEADS, HALF)
    _rotate_heads(k_ptr, tok, k_tok_stride, k_head_stride, n_k_heads, cos, sin, half,
                  IS_NEOX, K_HEADS, HALF)


def rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
           is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [T, Hq, D], k: [T, Hk, D] (last dim contiguous); rotates the first rot_dim in place."""
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and cos_sin_cache.stride(-1) == 1
    n_tok = q.shape[0]
    half = cos_sin_cache.shape[-1] // 2
    if n_tok > 0:
        _rotary_kernel[(n_tok,)](
            positions, q, k, cos_sin_cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            cos_sin_cache.stride(0), q.shape[1], k.shape[1], half, IS_NEOX=is_neox,
            Q_HEADS=triton.next_power_of_2(q.shape[1]), K_HEADS=triton.next_power_of_2(k.shape[1]),
            HALF=triton.next_power_of_2(half), num_warps=4)
    return q, k
