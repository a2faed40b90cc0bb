"""y = (x_q @ W_q.T) * x_scale * w_scale (+ b): the fp8 GEMM for per-channel fp8 weights (one
float32 scale per output row, as fp8 Llama checkpoints store them) and per-token fp8
activations (fp8_quant.quant_per_token), to run beside torch._scaled_mm's row-wise mode and keep
whichever is faster per shape.

The two scales factor out of the K sum, so they are applied once, to the finished tile. The dot
over K is promoted to the fp32 accumulator every BLOCK_K = 128 products (max_num_imprecise_acc):
Hopper's fp8 MMA accumulates in ~14 bits, and Triton's sm_90 default lets one chain run the whole
of K (2^30), which over K = 14336 loses more than bf16 keeps.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.fp8_quant import quant_per_token
from atom.kernels.triton.fp8_tiles import K_STEP, launch_tiles, store_tile, tile_ids
from atom.kernels.triton.pdl import pdl_wait

BLOCK_K = K_STEP


@triton.jit
def _scaled_gemm_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, bias_ptr, c_ptr, part_ptr,
                        m_rows, n_rows, k_dim, a_stride, as_stride, b_stride, bs_stride, c_stride,
                        kb_per_slice,
                        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT: tl.constexpr,
                        PDL: tl.constexpr):
    """as_stride and bs_stride are the scale vectors' (1): the argument list is the block
    GEMM's, so both launch through fp8_tiles.launch_tiles."""
    pdl_wait(PDL)
    pid_m, pid_n = tile_ids(m_rows, n_rows, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = rm < m_rows
    n_mask = rn < n_rows
    a_rows = a_ptr + rm.to(tl.int64)[:, None] * a_stride
    b_rows = b_ptr + rn.to(tl.int64)[:, None] * b_stride
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    kb0 = tl.program_id(1) * kb_per_slice
    for kb in range(kb0, tl.minimum(kb0 + kb_per_slice, tl.cdiv(k_dim, BLOCK_K))):
        cols = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        c_mask = cols < k_dim
        a = tl.load(a_rows + cols[None, :], mask=m_mask[:, None] & c_mask[None, :], other=0.0)
        b = tl.load(b_rows + cols[None, :], mask=n_mask[:, None] & c_mask[None, :], other=0.0)
        acc = tl.dot(a, tl.trans(b), acc, max_num_imprecise_acc=BLOCK_K)
    a_s = tl.load(as_ptr + rm * as_stride, mask=m_mask, other=0.0)
    b_s = tl.load(bs_ptr + rn * bs_stride, mask=n_mask, other=0.0)
    store_tile(acc * a_s[:, None] * b_s[None, :], rm, rn, m_mask, n_mask, bias_ptr, c_ptr,
               c_stride, part_ptr, m_rows, n_rows, HAS_BIAS, SPLIT)


def scaled_mm(xq: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              block_m: int | None = None, block_n: int | None = None,
              num_warps: int | None = None, num_stages: int | None = None,
              split_k: int | None = None) -> torch.Tensor:
    """xq [M, K] e4m3 with x_scale [M, 1] (or [M]) fp32, w [N, K] e4m3 with w_scale [N] fp32 →
    [M, N] in out_dtype. The block sizes and the K slice count override fp8_tiles'
    defaults (benchmarks and tests set them)."""
    m_rows, k_dim = xq.shape
    n_rows = w.shape[0]
    assert w.shape[1] == k_dim and xq.dtype == w.dtype == torch.float8_e4m3fn
    assert x_scale.numel() == m_rows and w_scale.numel() == n_rows
    assert xq.stride(-1) == 1 and w.stride(-1) == 1
    y = torch.empty((m_rows, n_rows), dtype=out_dtype, device=xq.device)
    launch_tiles(_scaled_gemm_kernel, xq, x_scale.reshape(-1), w, w_scale.reshape(-1), bias, y,
                 (block_m, block_n, num_warps, num_stages), split_k)
    return y


def fp8_scaled_gemm(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [M, K] bf16, w: [N, K] e4m3, w_scale: [N] fp32 → [M, N] in x's dtype: x quantised per
    token (one launch), then the scaled GEMM."""
    xq, xs = quant_per_token(x)
    return scaled_mm(xq, xs, w, w_scale, bias, out_dtype=x.dtype)
