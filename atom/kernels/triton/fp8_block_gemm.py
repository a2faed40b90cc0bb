"""y = x @ W.T (+ b) for DeepSeek-V3's block-scaled fp8 weights (`fp8_block`): W is e4m3 with one
float32 scale (`weight_scale_inv`) per 128 × 128 block, x is quantised to e4m3 per row and group
of 128 columns (fp8_quant.quant_per_token_group), and both operands meet in an fp8 tensor-core
dot.

BLOCK_K is the scale block (128), so each K step is one fp8 dot whose [BLOCK_M, BLOCK_N] result
carries exactly one x scale per row and one weight scale; it is scaled and added into an fp32
accumulator in registers. That is also the accumulation precision fix DeepSeek-V3 describes:
Hopper's fp8 MMA accumulates in ~14 bits, so promoting to fp32 every 128 products bounds its
error. BLOCK_N ≤ 128 divides 128, so a tile's columns share one weight-scale row.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.fp8_quant import quant_per_token_group
from atom.kernels.triton.fp8_tiles import K_STEP, launch_tiles, store_tile, tile_ids
from atom.kernels.triton.pdl import pdl_wait

SCALE_BLOCK = K_STEP  # weight_scale_inv blocks are 128 × 128


@triton.jit
def _block_gemm_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, bias_ptr, c_ptr, part_ptr,
                       m_rows, n_rows, k_dim, a_stride, as_stride, b_stride, bs_stride, c_stride,
                       kb_per_slice,
                       HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT: tl.constexpr,
                       PDL: tl.constexpr):
    pdl_wait(PDL)
    pid_m, pid_n = tile_ids(m_rows, n_rows, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = rm < m_rows
    n_mask = rn < n_rows
    a_rows = a_ptr + rm.to(tl.int64)[:, None] * a_stride
    b_rows = b_ptr + rn.to(tl.int64)[:, None] * b_stride
    as_rows = as_ptr + rm.to(tl.int64) * as_stride
    bs_row = bs_ptr + ((pid_n * BLOCK_N) // BLOCK_K) * bs_stride
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    kb0 = tl.program_id(1) * kb_per_slice
    for kb in range(kb0, tl.minimum(kb0 + kb_per_slice, tl.cdiv(k_dim, BLOCK_K))):
        cols = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        c_mask = cols < k_dim
        a = tl.load(a_rows + cols[None, :], mask=m_mask[:, None] & c_mask[None, :], other=0.0)
        b = tl.load(b_rows + cols[None, :], mask=n_mask[:, None] & c_mask[None, :], other=0.0)
        a_s = tl.load(as_rows + kb, mask=m_mask, other=0.0)
        b_s = tl.load(bs_row + kb)
        acc += tl.dot(a, tl.trans(b)) * (a_s[:, None] * b_s)
    store_tile(acc, rm, rn, m_mask, n_mask, bias_ptr, c_ptr, c_stride, part_ptr, m_rows, n_rows,
               HAS_BIAS, SPLIT)


def block_scaled_mm(xq: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor,
                    w_scale: torch.Tensor, bias: torch.Tensor | None = None,
                    out_dtype: torch.dtype = torch.bfloat16, block_m: int | None = None,
                    block_n: int | None = None, num_warps: int | None = None,
                    num_stages: int | None = None, split_k: int | None = None) -> torch.Tensor:
    """The GEMM over already-quantised operands: xq [M, K] e4m3 with x_scale [M, ceil(K/128)],
    w [N, K] e4m3 with w_scale [ceil(N/128), ceil(K/128)] → [M, N] in out_dtype. The block
    sizes and the K slice count override the defaults (benchmarks and tests set them)."""
    m_rows, k_dim = xq.shape
    n_rows = w.shape[0]
    kb = triton.cdiv(k_dim, SCALE_BLOCK)
    assert w.shape[1] == k_dim and xq.dtype == w.dtype == torch.float8_e4m3fn
    assert x_scale.shape == (m_rows, kb) and w_scale.shape == (triton.cdiv(n_rows, SCALE_BLOCK), kb)
    assert xq.stride(-1) == 1 and w.stride(-1) == 1 and x_scale.stride(-1) == 1
    assert w_scale.stride(-1) == 1 and (block_n or 64) <= SCALE_BLOCK
    y = torch.empty((m_rows, n_rows), dtype=out_dtype, device=xq.device)
    launch_tiles(_block_gemm_kernel, xq, x_scale, w, w_scale, bias, y,
                 (block_m, block_n, num_warps, num_stages), split_k)
    return y


def fp8_block_gemm(x: torch.Tensor, w: torch.Tensor, block_scale: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [M, K] bf16, w: [N, K] e4m3, block_scale: [ceil(N/128), ceil(K/128)] fp32 → [M, N] in
    x's dtype, x quantised per 1 × 128 group by a launch of its own, then the GEMM. At decode
    rows too: quantising x inside the GEMM's K loop, in every program that reads it, saved that
    launch but took 2-4x the time of both at M = 1 and 64 on R1's projections (H200, gpu_bench
    fp8_kernels: mlp_gate_up at one row 348 against 80 µs, o 236 against 56)."""
    xq, xs = quant_per_token_group(x, SCALE_BLOCK)
    return block_scaled_mm(xq, xs, w, block_scale, bias, out_dtype=x.dtype)
