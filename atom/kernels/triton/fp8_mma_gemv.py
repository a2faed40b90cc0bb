"""y = (xq @ W_q.T) * x_scale * w_scale for a few rows xq already in e4m3 (decode, M ≤ 16) and a
wide e4m3 weight with one scale per output row: W8A8 on the e4m3 tensor cores, the weight's rows
as the MMA's M and x's rows, padded to 16, as its N (wgmma m64n16k32 on Hopper).

The weight-only GEMV (fp8_gemv.py, gemv.py) converts every weight byte twice in registers (e4m3
-> f16 -> f32: 1.5 conversion instructions an element) and streams at 0.80 of a plain read's
rate; here the bytes go from global to shared memory by cp.async and into wgmma unconverted. On
the H200 (H200.md runs 110-111) Llama-3.1-8B's gate_up at one row takes 35.6 µs against
fp8_gemv's 38.7 (a plain read of its bytes: 34.7). x comes quantised per token by the kernel in
front of the projection (fp8_quant.rms_norm_quant), as the multi-row fp8 path and the CPU
emulation (fp8_reference) quantise it, so no launch is added.

One program a 64-row tile, no split-K: only weights with at least a tile per SM (`takes`), so
the narrow projections (the 8B's qkv, o, down: 64-96 tiles) stay on the weight-only GEMV.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait

MAX_ROWS = 16
M_PAD = 16  # wgmma's N for x's rows
BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES = 64, 256, 4, 4  # run 110's best at gate_up's shape


@triton.jit
def _mma_gemv_kernel(xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, y_ptr, m_rows, k_dim,
                     x_stride, w_stride, y_stride, HAS_BIAS: tl.constexpr, M_PAD: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ms = tl.arange(0, M_PAD)
    m_mask = ms < m_rows
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * w_stride
    x_rows = xq_ptr + ms[:, None] * x_stride
    acc = tl.zeros([BLOCK_N, M_PAD], tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):  # takes(): K a multiple of BLOCK_K, N of BLOCK_N
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_rows + cols[None, :])
        x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None], other=0.0)
        acc = tl.dot(w, tl.trans(x), acc)
    y = (acc * tl.load(ws_ptr + rows)[:, None]
         * tl.load(xs_ptr + ms, mask=m_mask, other=0.0)[None, :])
    if HAS_BIAS:
        y += tl.load(b_ptr + rows).to(tl.float32)[:, None]
    tl.store(y_ptr + ms[None, :] * y_stride + rows[:, None], y.to(y_ptr.dtype.element_ty),
             mask=m_mask[None, :])


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def takes(rows: int, weight: torch.Tensor) -> bool:
    """1..16 rows against an e4m3 [N, K] weight on a GPU with e4m3 tensor cores, whose tiles
    fill the SMs without a split (N / 64 ≥ SMs) and divide it (N % 64 == K % 256 == 0)."""
    if not (weight.is_cuda and weight.dtype == torch.float8_e4m3fn and 1 <= rows <= MAX_ROWS
            and weight.dim() == 2 and weight.stride(-1) == 1):
        return False
    n, k = weight.shape
    index = weight.device.index if weight.device.index is not None else torch.cuda.current_device()
    return (torch.cuda.get_device_capability(index) >= (8, 9) and n % BLOCK_N == 0
            and k % BLOCK_K == 0 and weight.stride(0) % 16 == 0
            and n // BLOCK_N >= _sm_count(index))


def mma_gemv(xq: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
             bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16
             ) -> torch.Tensor:
    """xq [M, K] e4m3 with x_scale [M, 1] (or [M]) fp32, w [N, K] e4m3 with w_scale [N] fp32 →
    [M, N] in out_dtype (M ≤ 16, N % 64 == 0, K % 256 == 0)."""
    m_rows, k_dim = xq.shape
    n_rows = w.shape[0]
    assert 1 <= m_rows <= MAX_ROWS and w.shape[1] == k_dim and xq.stride(-1) == 1
    assert n_rows % BLOCK_N == 0 and k_dim % BLOCK_K == 0 and w.stride(-1) == 1
    assert x_scale.numel() == m_rows and w_scale.numel() == n_rows
    y = torch.empty((m_rows, n_rows), dtype=out_dtype, device=xq.device)
    ws = w_scale.reshape(-1)
    _mma_gemv_kernel[(n_rows // BLOCK_N,)](
        xq, x_scale.reshape(-1), w, ws, bias if bias is not None else ws, y, m_rows, k_dim,
        xq.stride(0), w.stride(0), y.stride(0), HAS_BIAS=bias is not None, M_PAD=M_PAD,
        BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        **pdl_args(xq.device))
    return y
