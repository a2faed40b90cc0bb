"""What the two tiled fp8 GEMMs share (fp8_block_gemm's block-scaled one and fp8_scaled_gemm's
per-channel one): the order programs take their output tiles in, the tile table by row count,
the finished tile's store (into C, or as a K slice's fp32 partial), and the launch that splits
K when the tiles leave SMs idle (split_k.py). Both kernels take the same argument list, so one
launch serves both.

K_STEP = 128 is both GEMMs' K per loop step: the block scale's width, and how many products
the per-channel GEMM lets Hopper's fp8 MMA accumulate before it promotes them to fp32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args
from atom.kernels.triton.split_k import split_count, sum_slices

K_STEP = 128


@triton.jit
def tile_ids(m_rows, n_rows, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program. Programs walk GROUP_M row tiles down one column of tiles
    before moving right, so a wave of programs shares weight tiles in L2 (the Triton matmul
    tutorial's ordering)."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(m_rows, BLOCK_M)
    tiles_n = tl.cdiv(n_rows, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


@triton.jit
def store_tile(acc, rm, rn, m_mask, n_mask, bias_ptr, c_ptr, c_stride, part_ptr, m_rows, n_rows,
               HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr):
    """The finished tile: with SPLIT, this K slice's fp32 partial at [slice, m, n] (the bias is
    split_k.sum_slices' to add, once); else bias-added and cast into C."""
    mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT:
        base = part_ptr + tl.program_id(1).to(tl.int64) * m_rows * n_rows
        tl.store(base + rm.to(tl.int64)[:, None] * n_rows + rn[None, :], acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rn, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(c_ptr + rm.to(tl.int64)[:, None] * c_stride + rn[None, :],
                 acc.to(c_ptr.dtype.element_ty), mask=mask)


def tile_config(m_rows: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) by row count, not autotuned (autotuning costs a
    compile per candidate at start-up). Decode (M ≤ 64) streams the weight: narrow N tiles give
    the most programs (N = 7168 → 112 tiles of 64; split-K fills the SMs that narrower outputs
    leave idle) and deep pipelines hide the latency; 64 rows even for M = 1, since below 64
    Triton's dot on sm_90 is an mma.sync that converts both fp8 operands to f16 first, and the
    wasted rows of an fp8 wgmma cost less than the weight's bytes take to arrive. Prefill is
    compute-bound and wants the 128 × 128 tile of two warp groups. Shared memory per stage is
    (BLOCK_M + BLOCK_N) × 128 bytes: 96 KiB at 128 × 128 and 3 stages."""
    if m_rows <= 64:
        return 64, 64, 4, 4
    return 128, 128, 8, 3


def launch_tiles(kernel, xq: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor,
                 w_scale: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor,
                 overrides: tuple, split_k: int | None, **consts) -> None:
    """One tiled fp8 GEMM into y, its tile from tile_config unless overridden, split along K
    by split_k.split_count (or `split_k`) when its tiles leave SMs idle, then the slices' sum.
    `consts` are the kernel's own constexprs."""
    m_rows, n_rows = y.shape
    if m_rows == 0:
        return
    bm, bn, nw, ns = (o or d for o, d in zip(overrides, tile_config(m_rows)))
    k_dim = xq.shape[1]
    tiles = triton.cdiv(m_rows, bm) * triton.cdiv(n_rows, bn)
    k_blocks = triton.cdiv(k_dim, K_STEP)
    per_slice = triton.cdiv(k_blocks, split_k or split_count(tiles, k_blocks, y.device))
    slices = triton.cdiv(k_blocks, per_slice)  # none left empty
    part = (torch.empty((slices, m_rows, n_rows), dtype=torch.float32, device=y.device)
            if slices > 1 else y)
    kernel[(tiles, slices)](
        xq, x_scale, w, w_scale, bias if bias is not None else w_scale, y, part,
        m_rows, n_rows, k_dim, xq.stride(0), x_scale.stride(0), w.stride(0), w_scale.stride(0),
        y.stride(0), per_slice,
        HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=K_STEP, GROUP_M=8,
        SPLIT=slices > 1, num_warps=nw, num_stages=ns, **consts, **pdl_args(y.device))
    if slices > 1:
        sum_slices(part, bias, y)
