"""y = (xq @ W_q.T) * x_scale * w_scale for a few rows xq already in e4m3 (decode, M ≤ 16) and a
wide e4m3 weight with one scale per output row: W8A8 on the e4m3 tensor cores, the weight's rows
as the MMA's M and x's rows, padded to 16, as its N (wgmma m64n16k32 on Hopper).

The weight-only GEMV (fp8_gemv.py, gemv.py) converts every weight byte twice in registers (e4m3
-> f16 -> f32: 1.5 conversion instructions an element) and streams at 0.80 of a plain read's
rate; here the bytes go from global to shared memory by cp.async and into wgmma unconverted. On
the H200 Llama-3.1-8B's gate_up at one row takes 35.6 µs against
fp8_gemv's 38.7 (a plain read of its bytes: 34.7). x comes quantised per token by the kernel in
front of the projection (fp8_quant.rms_norm_quant, silu_mul_quant), as the multi-row fp8 path
and the CPU emulation (fp8_reference) quantise it, so no launch is added. As gemv.py's, the
first weight tile loads before the PDL wait: `w` must be a weight no kernel of the step writes.

One program a 64-row tile and K slice. Weights with fewer tiles than the GPU has SMs (the 8B's
down: 64) cut K into slices (4 there, the best of fp8_gemv_mma_probe.py's sweep) whose fp32 partials the slice that
finishes last sums in slice order, counted on the caller's `counters` (one int32 a tile, left at
0, as paged_decode_attention's): atomics would make the sum depend on arrival order. Without
counters only weights with a tile per SM are taken.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait

MAX_ROWS = 16
M_PAD = 16  # wgmma's N for x's rows
BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES = 64, 256, 4, 4  # the probe's best at gate_up's shape


@triton.jit(do_not_specialize=["n_slices"])
def _mma_gemv_kernel(xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, y_ptr, part_ptr, count_ptr, m_rows,
                     n_rows, k_dim, k_slice, n_slices, x_stride, w_stride, y_stride,
                     HAS_BIAS: tl.constexpr, M_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, PDL: tl.constexpr):
    tile, piece = tl.program_id(0), tl.program_id(1)
    rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    ms = tl.arange(0, M_PAD)
    m_mask = ms < m_rows
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * w_stride
    x_rows = xq_ptr + ms[:, None] * x_stride
    k_lo = piece * k_slice
    # The weight's first tile before the wait (the module doc says why), x after it.
    cols = k_lo + tl.arange(0, BLOCK_K)
    w = tl.load(w_rows + cols[None, :])
    pdl_wait(PDL)
    x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None], other=0.0)
    acc = tl.dot(w, tl.trans(x), tl.zeros([BLOCK_N, M_PAD], tl.float32))
    for k0 in range(k_lo + BLOCK_K, k_lo + k_slice, BLOCK_K):  # takes(): slices divide K
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_rows + cols[None, :])
        x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None], other=0.0)
        acc = tl.dot(w, tl.trans(x), acc)
    out = ms[None, :] * n_rows + rows[:, None]  # [M_PAD, N] in a slice's partial
    if SPLIT:
        tl.store(part_ptr + piece * M_PAD * n_rows + out, acc)
        # Every thread's partial stored, then published by the count's release; the last
        # arrival's acquire sees every slice's (as paged_decode_attention's merge).
        tl.debug_barrier()
        count = count_ptr + tile
        if tl.atomic_add(count, 1, sem="acq_rel", scope="gpu") == n_slices - 1:
            acc = tl.zeros([BLOCK_N, M_PAD], tl.float32)
            for p in range(0, n_slices):
                acc += tl.load(part_ptr + p * M_PAD * n_rows + out, cache_modifier=".cg")
            _finish(acc, rows, ms, m_mask, xs_ptr, ws_ptr, b_ptr, y_ptr, y_stride, HAS_BIAS)
            tl.store(count, 0)
    else:
        _finish(acc, rows, ms, m_mask, xs_ptr, ws_ptr, b_ptr, y_ptr, y_stride, HAS_BIAS)


@triton.jit
def _finish(acc, rows, ms, m_mask, xs_ptr, ws_ptr, b_ptr, y_ptr, y_stride,
            HAS_BIAS: tl.constexpr):
    y = (acc * tl.load(ws_ptr + rows)[:, None]
         * tl.load(xs_ptr + ms, mask=m_mask, other=0.0)[None, :])
    if HAS_BIAS:
        y += tl.load(b_ptr + rows).to(tl.float32)[:, None]
    tl.store(y_ptr + ms[None, :] * y_stride + rows[:, None], y.to(y_ptr.dtype.element_ty),
             mask=m_mask[None, :])


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def slices(n: int, k: int, device: torch.device) -> int:
    """K slices a tile: about two programs an SM where the tiles are fewer than the SMs (1
    where they are not, or off the GPU), each slice a whole number of K steps, at most 8."""
    if device.type != "cuda":
        return 1
    tiles, steps, sms = n // BLOCK_N, k // BLOCK_K, _sm_count(_index(device))
    s = 1
    while s < 8 and tiles * s < sms and steps % (2 * s) == 0:
        s *= 2
    return s if tiles < sms else 1


def takes(rows: int, weight: torch.Tensor, counters: torch.Tensor | None = None) -> bool:
    """1..16 rows against an e4m3 [N, K] weight on a GPU with e4m3 tensor cores whose tiles
    divide it (N % 64 == K % 256 == 0) and, with its slices, fill the SMs: a split needs
    `counters` for every tile."""
    if not (weight.is_cuda and weight.dtype == torch.float8_e4m3fn and 1 <= rows <= MAX_ROWS
            and weight.dim() == 2 and weight.stride(-1) == 1):
        return False
    n, k = weight.shape
    index = _index(weight.device)
    if not (torch.cuda.get_device_capability(index) >= (8, 9) and n % BLOCK_N == 0
            and k % BLOCK_K == 0 and weight.stride(0) % 16 == 0):
        return False
    s = slices(n, k, weight.device)
    if n // BLOCK_N * s < _sm_count(index):
        return False
    return s == 1 or (counters is not None and counters.numel() >= n // BLOCK_N)


def mma_gemv(xq: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
             bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
             counters: torch.Tensor | None = None, n_slices: int | None = None) -> torch.Tensor:
    """xq [M, K] e4m3 with x_scale [M, 1] (or [M]) fp32, w [N, K] e4m3 with w_scale [N] fp32 →
    [M, N] in out_dtype (M ≤ 16, N % 64 == 0, K % 256 == 0). `counters` (int32, one a tile,
    zero) for a split; `n_slices` overrides `slices` (tests)."""
    m_rows, k_dim = xq.shape
    n_rows = w.shape[0]
    assert 1 <= m_rows <= MAX_ROWS and w.shape[1] == k_dim and xq.stride(-1) == 1
    assert n_rows % BLOCK_N == 0 and k_dim % BLOCK_K == 0 and w.stride(-1) == 1
    assert x_scale.numel() == m_rows and w_scale.numel() == n_rows
    s = n_slices or (slices(n_rows, k_dim, xq.device) if counters is not None else 1)
    assert k_dim % (s * BLOCK_K) == 0
    assert s == 1 or (counters is not None and counters.numel() >= n_rows // BLOCK_N)
    y = torch.empty((m_rows, n_rows), dtype=out_dtype, device=xq.device)
    part = (torch.empty((s, M_PAD, n_rows), dtype=torch.float32, device=xq.device) if s > 1
            else y)
    ws = w_scale.reshape(-1)
    _mma_gemv_kernel[(n_rows // BLOCK_N, s)](
        xq, x_scale.reshape(-1), w, ws, bias if bias is not None else ws, y, part,
        counters if s > 1 else ws, m_rows, n_rows, k_dim, k_dim // s, s, xq.stride(0),
        w.stride(0), y.stride(0), HAS_BIAS=bias is not None, M_PAD=M_PAD, BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K, SPLIT=s > 1, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        **pdl_args(xq.device))
    return y
