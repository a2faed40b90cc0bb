"""Split-K for the fp8 GEMMs at decode row counts: when a GEMM has fewer output tiles than the
GPU has SMs, each tile's K range is cut into slices run by programs of their own, each writes
its fp32 partial tile, and one more launch sums the slices (plus the bias) into the output.

A decode GEMM is a weight stream, and a program streams at a fraction of one SM's share of
HBM: DeepSeek-V3's kv_a_proj (N = 576) is 9 tiles of 64 columns, 9 SMs of 132 reading 4 MB.
Partials (not atomics) keep the sum's order fixed, so a step's result does not depend on
which slice lands first.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait

MIN_BLOCKS_PER_SLICE = 2  # K steps per slice: fewer leave a slice's loads nothing to overlap


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def split_count(tiles: int, k_blocks: int, device: torch.device) -> int:
    """Slices per tile: enough to give every SM a program, at least MIN_BLOCKS_PER_SLICE K
    steps each; 1 off CUDA (the interpreter gains nothing from it) or with tiles to spare."""
    if device.type != "cuda":
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return max(1, min(sms // max(tiles, 1), k_blocks // MIN_BLOCKS_PER_SLICE))


@triton.jit
def _sum_slices_kernel(part_ptr, bias_ptr, c_ptr, n_elems, n_cols, c_stride, n_slices,
                       HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elems
    acc = tl.zeros([BLOCK], tl.float32)
    for s in range(0, n_slices):
        acc += tl.load(part_ptr + s * n_elems + offs, mask=mask, other=0.0)
    col = offs % n_cols
    if HAS_BIAS:
        acc += tl.load(bias_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + (offs // n_cols).to(tl.int64) * c_stride + col,
             acc.to(c_ptr.dtype.element_ty), mask=mask)


def sum_slices(partials: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> None:
    """out[m, n] = Σ_s partials[s, m, n] (+ bias[n]), in out's dtype; partials: fp32
    [slices, M, N] contiguous."""
    slices, m_rows, n_cols = partials.shape
    n = m_rows * n_cols
    block = 1024
    _sum_slices_kernel[(triton.cdiv(n, block),)](
        partials, bias if bias is not None else partials, out, n, n_cols, out.stride(0), slices,
        HAS_BIAS=bias is not None, BLOCK=block, num_warps=4, **pdl_args(out.device))
