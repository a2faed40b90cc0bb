"""Fused MoE: the routed experts of one layer as two grouped GEMMs over expert-sorted blocks.

moe_align lays the (token, slot) pairs out in blocks of one expert each. The first GEMM gathers
each block's token rows of x, multiplies them by that expert's gate and up rows of w13 at once
and applies SiLU-and-mul in its epilogue, writing one intermediate row per pair. The second
multiplies those rows by the expert's w2, scales them by the router weight and writes one output
row per pair; the k rows of a token are then summed in a fixed order. No atomics: the result is
the same run to run. Nothing reads back to the host, so the forward captures in a CUDA graph.
fp8 experts (e4m3 with per-channel or 128 × 128 block scales) take the same kernel: the
activations are quantized per token (per token and 128 columns) before each GEMM.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Optional

import torch
import triton
import triton.language as tl

from atom.kernels.triton import fp8_quant, moe_align
from atom.kernels.triton.dot_dtype import dot_dtype, dot_precision, interpreted
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
SCALE_BLOCK = 128  # block-scaled fp8 weights: one scale per 128 × 128 (DeepSeek-V3's)


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
    sms = _sm_count(device.index or 0) if device.type == "cuda" else 132  # interpreted: an H200
    bn = cfg.block_n
    while bn > 16 and blocks * triton.cdiv(n_out, bn) < 2 * sms:
        bn //= 2
    return bn


@triton.jit
def _accumulate(acc, a, b_ptrs, b_mask, a_s, bs_ptr, kb, QUANT: tl.constexpr, DOT: tl.constexpr,
                PREC: tl.constexpr):
    """One K tile into acc. Block-scaled fp8 (QUANT 2): the tile is one 128-wide scale block,
    so its dot is scaled by the rows' activation scales and the weight block's scale, and
    summed in float32 every 128 products (Hopper's fp8 MMA keeps ~14 bits: DeepSeek-V3's
    promotion). Per-channel fp8 (QUANT 1): the same promotion, the scales applied at the end."""
    b = tl.load(b_ptrs, mask=b_mask, other=0.0).to(DOT)
    if QUANT == 2:
        out = acc + tl.dot(a, b) * (a_s[:, None] * tl.load(bs_ptr + kb))
    elif QUANT == 1:
        out = acc + tl.dot(a, b)
    else:
        out = tl.dot(a, b, acc, input_precision=PREC)
    return out


@triton.jit
def _channel_scaled(acc, a_s, bs_ptr, cols, col_ok, bs_stride_n):
    b_s = tl.load(bs_ptr + cols * bs_stride_n, mask=col_ok, other=0.0)
    return acc * a_s[:, None] * b_s[None, :]


@triton.jit(do_not_specialize=["pairs"])
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, sorted_ptr, block_expert_ptr, weight_ptr,
                     a_scale_ptr, b_scale_ptr, pairs, n_out, k_dim, a_stride, b_stride_e,
                     b_stride_n, c_stride, as_stride, bs_stride_e, bs_stride_n,
                     ROW_DIV: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr,
                     QUANT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP: tl.constexpr, DOT: tl.constexpr,
                     PREC: tl.constexpr, PDL: tl.constexpr):
    """C[pair] = A[pair // ROW_DIV] @ B[e].T for the pairs of each block (e its expert). GATED:
    B's rows n_out.. are the up half, and C = silu(gate) * up. ROUTED: C is scaled by the pair's
    router weight. QUANT: 0 plain; fp8 A and B with per-row A scales and B scales per output
    channel (1) or per 128 × 128 block (2, A's per 128 columns; BLOCK_K is then 128). Grouped
    tile order: GROUP blocks share each weight tile while it is in L2."""
    pdl_wait(PDL)
    pid = tl.program_id(0)
    num_n = tl.cdiv(n_out, BLOCK_N)
    num_m = tl.num_programs(0) // num_n
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
    as_ptrs = a_scale_ptr + rows * as_stride
    bs_gate = b_scale_ptr + expert * bs_stride_e + (pid_n * BLOCK_N // BLOCK_K) * bs_stride_n
    bs_up = bs_gate + (n_out // BLOCK_K) * bs_stride_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_s = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):
        k_ok = ks < k_dim - k0
        b_mask = k_ok[:, None] & col_ok[None, :]
        a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0).to(DOT)
        kb = k0 // BLOCK_K
        if QUANT == 2:
            a_s = tl.load(as_ptrs + kb, mask=valid, other=0.0)
        acc = _accumulate(acc, a, b_ptrs, b_mask, a_s, bs_gate, kb, QUANT, DOT, PREC)
        if GATED:
            acc_up = _accumulate(acc_up, a, b_ptrs + n_out * b_stride_n, b_mask, a_s, bs_up, kb,
                                 QUANT, DOT, PREC)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if QUANT == 1:
        a_s = tl.load(as_ptrs, mask=valid, other=0.0)
        bs_rows = b_scale_ptr + expert * bs_stride_e
        acc = _channel_scaled(acc, a_s, bs_rows, cols, col_ok, bs_stride_n)
        if GATED:
            acc_up = _channel_scaled(acc_up, a_s, bs_rows, cols + n_out, col_ok, bs_stride_n)
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


@dataclass(frozen=True)
class Operand:
    """A GEMM input: plain, or fp8 codes with their float32 scales (activations: per row
    [M, 1] or per row and 128 columns [M, ceil(K/128)]; weights: per output channel [E, N] or
    per 128 × 128 block [E, ceil(N/128), ceil(K/128)])."""
    data: torch.Tensor
    scale: Optional[torch.Tensor] = None


def _quant_mode(w_scale: Optional[torch.Tensor]) -> int:
    return 0 if w_scale is None else 1 if w_scale.dim() == 2 else 2


def _activations(x: torch.Tensor, quant: int) -> Operand:
    """x as the GEMM reads it: itself, or quantized per token (1) / per token and 128 (2)."""
    if quant == 0:
        return Operand(x)
    if quant == 1:
        return Operand(*fp8_quant.quant_per_token(x))
    return Operand(*fp8_quant.quant_per_token_group(x, SCALE_BLOCK))


def _dot_dtype(a: torch.Tensor):
    """fp8 operands go into the dot as they are (fp32 under the interpreter)."""
    if a.dtype == torch.float8_e4m3fn:
        return tl.float32 if interpreted() else tl.float8e4nv
    return dot_dtype(a.dtype)


def _grouped_gemm(a: Operand, b: Operand, c: torch.Tensor, blocks: moe_align.ExpertBlocks,
                  weights: torch.Tensor, row_div: int, gated: bool, routed: bool,
                  cfg: MoeConfig) -> None:
    n_out = c.shape[1]
    bn = _block_n(cfg, blocks.num_blocks, n_out, a.data.device)
    grid = (blocks.num_blocks * triton.cdiv(n_out, bn),)
    a_s = weights if a.scale is None else a.scale  # any float32 pointer where none is read
    b_s = weights if b.scale is None else b.scale
    a_strides = (0,) if a.scale is None else (a_s.stride(0),)
    b_strides = (0, 0) if b.scale is None else (b_s.stride(0), b_s.stride(1))
    assert b.scale is None or b_s.stride(-1) == 1  # the kernel steps K blocks by one
    _moe_gemm_kernel[grid](
        a.data, b.data, c, blocks.sorted_ids, blocks.block_expert, weights, a_s, b_s, c.shape[0],
        n_out, a.data.shape[1], a.data.stride(0), b.data.stride(0), b.data.stride(1),
        c.stride(0), *a_strides, *b_strides, ROW_DIV=row_div, GATED=gated, ROUTED=routed,
        QUANT=_quant_mode(b.scale), BLOCK_M=cfg.block_m, BLOCK_N=bn, BLOCK_K=cfg.block_k,
        GROUP=GROUP_M, DOT=_dot_dtype(a.data), PREC=dot_precision(c.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_args(a.data.device))


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
              experts: torch.Tensor, cfg: Optional[MoeConfig] = None,
              w13_scale: Optional[torch.Tensor] = None,
              w2_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [T, H]; w13 [E, 2I, H] (gate rows, then up rows); w2 [E, H, I]; weights, experts
    [T, k] (the router's float32 weights and distinct expert ids; E: another rank's expert,
    skipped) → Σ_k weight · expert(x), [T, H] in x's dtype. fp8 experts: w13 and w2 e4m3 with their scales, per output channel
    ([E, 2I], [E, H]: activations quantized per token) or per 128 × 128 block ([E, 2I/128,
    H/128], [E, H/128, I/128]: activations per token and 128 columns; I a multiple of 128).
    cfg overrides the choice by size (tests run both on small shapes)."""
    t, hidden = x.shape
    k = experts.shape[1]
    num_experts, inter = w13.shape[0], w13.shape[1] // 2
    assert x.stride(1) == 1 and w13.is_contiguous() and w2.is_contiguous()
    assert (w13_scale is None) == (w2_scale is None)
    pairs = t * k
    if pairs == 0:
        return torch.zeros_like(x)
    quant = _quant_mode(w13_scale)
    cfg = cfg or choose_config(pairs, num_experts)
    if quant == 2:  # one K tile per scale block, and the up rows start on a block
        assert inter % SCALE_BLOCK == 0, "block-scaled experts need I % 128 == 0"
        cfg = replace(cfg, block_k=SCALE_BLOCK, block_n=min(cfg.block_n, SCALE_BLOCK))
    blocks = moe_align.align(experts, num_experts, cfg.block_m)
    w = weights.float().contiguous().view(-1)
    h = x.new_empty(pairs, inter)
    _grouped_gemm(_activations(x, quant), Operand(w13, w13_scale), h, blocks, w, k,
                  gated=True, routed=False, cfg=cfg)
    # Zeroed: a pair of expert id E (another rank's, under expert parallelism) is in no block,
    # so its row is never written and must add nothing to the k-sum; the fill is T·k·H writes
    # (7 MB at R1's T = 64: ~2 µs of HBM).
    y = x.new_zeros(pairs, hidden)
    _grouped_gemm(_activations(h, quant), Operand(w2, w2_scale), y, blocks, w, 1,
                  gated=False, routed=True, cfg=cfg)
    return y.view(t, k, hidden).sum(1)  # one launch; torch accumulates bf16 sums in float32
