"""Fused MoE: the routed experts of one layer as two grouped GEMMs over expert-sorted blocks.

moe_align lays the (token, slot) pairs out in blocks of one expert each. The first GEMM gathers
each block's token rows of x, multiplies them by that expert's gate and up rows of w13 at once
and applies SiLU-and-mul in its epilogue, writing one intermediate row per pair. The second
multiplies those rows by the expert's w2, scales them by the router weight and writes one output
row per pair; the k rows of a token are then summed in a fixed order. No atomics: the result is
the same run to run. Nothing reads back to the host, so the forward captures in a CUDA graph.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from atom.kernels.triton import moe_align
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision
from atom.kernels.triton.pdl import pdl_args, pdl_wait


@dataclass(frozen=True)
class MoeConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# Decode: a few pairs per expert, so a 16-row block (the smallest tl.dot takes) wastes the
# least; the weight stream is the cost, and long K tiles keep it wide.
DECODE = MoeConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=4)
# Prefill: hundreds of pairs per expert; 64-row blocks reuse each weight tile four times more.
PREFILL = MoeConfig(block_m=64, block_n=128, block_k=64, num_warps=8, num_stages=3)
# Above this many pairs per expert on average, the prefill blocks waste less than they reuse.
PREFILL_PAIRS_PER_EXPERT = 32
GROUP_M = 8


def choose_config(pairs: int, num_experts: int) -> MoeConfig:
    """Two fixed configs picked by pairs per expert, not an autotune: every tuned variant would
    be compiled (and timed) at start-up."""
    return PREFILL if pairs > PREFILL_PAIRS_PER_EXPERT * num_experts else DECODE


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _block_n(cfg: MoeConfig, blocks: int, n_out: int, device: torch.device) -> int:
    """Narrower output tiles when the grid would leave SMs idle (decode of narrow experts: R1's
    tp8 slice, I = 256, gives 8 blocks × 4 tiles at batch 1): a decode GEMM is a weight stream,
    and every SM must pull its share of it."""
    sms = _sm_count(device.index or 0) if device.type == "cuda" else 132
    bn = cfg.block_n
    while bn > 16 and blocks * triton.cdiv(n_out, bn) < 2 * sms:
        bn //= 2
    return bn


@triton.jit(do_not_specialize=["pairs"])
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, sorted_ptr, block_expert_ptr, weight_ptr,
                     pairs, n_out, k_dim, a_stride, b_stride_e, b_stride_n, c_stride,
                     ROW_DIV: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                     PDL: tl.constexpr):
    """C[pair] = A[pair // ROW_DIV] @ B[e].T for the pairs of each block (e its expert). GATED:
    B's rows n_out.. are the up half, and C = silu(gate) * up. ROUTED: C is scaled by the pair's
    router weight. Grouped tile order: GROUP blocks share each weight tile while it is in L2."""
    pdl_wait(PDL)
    pid = tl.program_id(0)
    num_m = tl.num_programs(0) // tl.cdiv(n_out, BLOCK_N)
    num_n = tl.cdiv(n_out, BLOCK_N)
    group_first = (pid // (GROUP * num_n)) * GROUP
    group_size = tl.minimum(num_m - group_first, GROUP)
    pid_m = group_first + (pid % (GROUP * num_n)) % group_size
    pid_n = (pid % (GROUP * num_n)) // group_size
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:
        return
    ids = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = ids < pairs
    rows = (ids // ROW_DIV).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_out
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * a_stride + ks[None, :]
    b_ptrs = b_ptr + expert * b_stride_e + cols[None, :].to(tl.int64) * b_stride_n + ks[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):
        k_ok = ks < k_dim - k0
        a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0).to(DOT)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0).to(DOT)
        acc = tl.dot(a, b, acc, input_precision=PREC)
        if GATED:
            up = tl.load(b_ptrs + n_out * b_stride_n, mask=k_ok[:, None] & col_ok[None, :],
                         other=0.0).to(DOT)
            acc_up = tl.dot(a, up, acc_up, input_precision=PREC)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    out_ty = c_ptr.dtype.element_ty
    # Rounded where the per-expert loop rounds: each GEMM's output, then silu, then the product.
    y = acc.to(out_ty).to(tl.float32)
    if GATED:
        s = (y / (1.0 + tl.exp(-y))).to(out_ty).to(tl.float32)
        y = s * acc_up.to(out_ty).to(tl.float32)
    if ROUTED:
        y = y * tl.load(weight_ptr + ids, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + ids.to(tl.int64)[:, None] * c_stride + cols[None, :]
    tl.store(c_ptrs, y.to(out_ty), mask=valid[:, None] & col_ok[None, :])


def _grouped_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, blocks: moe_align.ExpertBlocks,
                  weights: torch.Tensor, row_div: int, gated: bool, routed: bool,
                  cfg: MoeConfig) -> None:
    n_out = c.shape[1]
    bn = _block_n(cfg, blocks.num_blocks, n_out, a.device)
    grid = (blocks.num_blocks * triton.cdiv(n_out, bn),)
    _moe_gemm_kernel[grid](
        a, b, c, blocks.sorted_ids, blocks.block_expert, weights, c.shape[0], n_out, a.shape[1],
        a.stride(0), b.stride(0), b.stride(1), c.stride(0), ROW_DIV=row_div, GATED=gated,
        ROUTED=routed, BLOCK_M=cfg.block_m, BLOCK_N=bn, BLOCK_K=cfg.block_k, GROUP=GROUP_M,
        DOT=dot_dtype(a.dtype), PREC=dot_precision(a.dtype), num_warps=cfg.num_warps,
        num_stages=cfg.num_stages, **pdl_args(a.device))


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
              experts: torch.Tensor, cfg: MoeConfig | None = None) -> torch.Tensor:
    """x [T, H]; w13 [E, 2I, H] (gate rows, then up rows); w2 [E, H, I]; weights, experts
    [T, k] (the router's float32 weights and distinct expert ids) → Σ_k weight · expert(x),
    [T, H] in x's dtype. cfg overrides the choice by size (tests run both on small shapes)."""
    t, hidden = x.shape
    k = experts.shape[1]
    num_experts, inter = w13.shape[0], w13.shape[1] // 2
    assert x.stride(1) == 1 and w13.is_contiguous() and w2.is_contiguous()
    pairs = t * k
    if pairs == 0:
        return torch.zeros_like(x)
    cfg = cfg or choose_config(pairs, num_experts)
    blocks = moe_align.align(experts, num_experts, cfg.block_m)
    w = weights.float().contiguous().view(-1)
    h = x.new_empty(pairs, inter)
    _grouped_gemm(x, w13, h, blocks, w, k, gated=True, routed=False, cfg=cfg)
    y = x.new_empty(pairs, hidden)
    _grouped_gemm(h, w2, y, blocks, w, 1, gated=False, routed=True, cfg=cfg)
    return y.view(t, k, hidden).sum(1, dtype=torch.float32).to(x.dtype)
