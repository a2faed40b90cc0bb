"""y = (x @ W_q.T) * w_scale (+ b) for a few rows x (decode, M ≤ 16) and an fp8 e4m3 weight
with one float32 scale per output row: weight-only fp8, x stays bf16.

Few rows make a linear a weight stream, and e4m3 halves its bytes. Each program owns BLOCK_N
whole rows and streams them along K with 16-byte loads (16 e4m3 per thread and load), no
split-K, one launch; the bytes are converted in registers and the per-row scale multiplies the
finished dot.

- One row: gemv.py's kernel (HAS_SCALE), every element to fp32 and an FMA, exact and
  range-safe; its norm and SiLU fusions serve fp8 weights the same way.
- 2..16 rows (or `dot=True`): e4m3 → f16 (one cvt.rn.f16x2.e4m3x2 per pair, exact) and x → f16,
  then a tensor-core dot with x padded to 16 rows, fp32 accumulation. f16 holds every e4m3
  value and bf16's 8-bit mantissa exactly, but not bf16's range: an activation beyond ±65504
  would be inf (far above the ~10^3 outliers of decoder activations).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton import gemv as gemv_mod
from atom.kernels.triton.gemv import _load_w
from atom.kernels.triton.pdl import pdl_args, pdl_wait

MAX_ROWS = 16
M_PAD = 16  # tl.dot's smallest N


@triton.jit
def _dot_step(w, x_rows, cols, m_mask, k_dim, acc):
    """acc + the weight tile w at `cols` against x's rows there, on f16 tensor cores."""
    x = tl.load(x_rows + cols[None, :], mask=m_mask[:, None] & (cols < k_dim)[None, :], other=0.0)
    return tl.dot(w.to(tl.float16), tl.trans(x.to(tl.float16)), acc)


@triton.jit
def _fp8_gemv_kernel(x_ptr, w_ptr, s_ptr, b_ptr, y_ptr, m_rows, n_rows, k_dim,
                     x_stride, w_stride, y_stride,
                     HAS_BIAS: tl.constexpr, M_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    r_mask = rows < n_rows
    ms = tl.arange(0, M_PAD)
    m_mask = ms < m_rows
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * w_stride
    x_rows = x_ptr + ms[:, None] * x_stride
    cols = tl.arange(0, BLOCK_K)
    w = _load_w(w_rows, cols, r_mask, k_dim)  # before the wait, as gemv.py's (its doc says why)
    pdl_wait(PDL)
    acc = _dot_step(w, x_rows, cols, m_mask, k_dim, tl.zeros([BLOCK_N, M_PAD], tl.float32))
    for k0 in range(BLOCK_K, k_dim, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        acc = _dot_step(_load_w(w_rows, cols, r_mask, k_dim), x_rows, cols, m_mask, k_dim, acc)
    y = acc * tl.load(s_ptr + rows, mask=r_mask, other=0.0)[:, None]
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=r_mask, other=0.0).to(tl.float32)[:, None]
    tl.store(y_ptr + ms[None, :] * y_stride + rows[:, None], y.to(y_ptr.dtype.element_ty),
             mask=m_mask[None, :] & r_mask[:, None])


def _config(dot: bool, n_rows: int, k_dim: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps), a first guess to be re-chosen from gpu_bench's
    fp8_kernels sweep. One row: gemv.py's table with 2048-column steps where the rows are few;
    a [16, 2048] step would take 233 registers a thread (ptxas, sm_90), one program of 8 warps
    per SM, so long rows step 1024 columns: still four 16-byte loads per thread and step, at
    125 registers. The dot: 32-row blocks keep ≥ 128 programs from N = 4096 on at 64
    registers."""
    if dot:
        return (16 if n_rows <= 2048 else 32), 256, 4
    if n_rows <= 2048:
        return 4, 2048, 8
    if n_rows <= 4096 and k_dim >= 4096:
        return 16, 1024, 8
    return 8, 1024, 8 if k_dim >= 8192 else 4


def takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether this kernel serves the linear: 1..16 bf16/fp16 rows on the GPU against an e4m3
    weight whose rows start on 16-byte boundaries (K % 16 == 0: the wide loads need it); past
    16 rows the weight is re-read per row tile and a GEMM is the right kernel."""
    return (x.dim() == 2 and 1 <= x.shape[0] <= MAX_ROWS and x.is_cuda
            and x.dtype in (torch.bfloat16, torch.float16) and weight.dtype == torch.float8_e4m3fn
            and x.stride(-1) == 1 and weight.stride(-1) == 1 and weight.shape[1] % 16 == 0
            and weight.stride(0) % 16 == 0)


def fp8_gemv(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor | None,
             bias: torch.Tensor | None = None, dot: bool | None = None,
             block_n: int | None = None, block_k: int | None = None,
             num_warps: int | None = None,
             block_scale: torch.Tensor | None = None) -> torch.Tensor:
    """x: [M, K] (M ≤ 16), w: [N, K] e4m3, w_scale: [N] fp32 → [M, N] in x's dtype; or, at one
    row, block_scale [ceil(N/128), ceil(K/128)] fp32 (gemv.py's HAS_BLOCK_SCALE) in place of
    w_scale. `dot` and the block sizes override the defaults (benchmarks sweep them)."""
    m_rows, k_dim = x.shape
    n_rows = w.shape[0]
    if block_scale is not None:
        assert m_rows == 1 and w_scale is None and not dot
        bn, bk, nw = _config(False, n_rows, k_dim)
        return gemv_mod.gemv(x, w, bias, block_n=block_n or bn, block_k=block_k or bk,
                             num_warps=num_warps or nw, block_scale=block_scale)
    assert 1 <= m_rows <= MAX_ROWS and w.shape[1] == k_dim and w.dtype == torch.float8_e4m3fn
    assert x.stride(-1) == 1 and w.stride(-1) == 1 and w_scale.numel() == n_rows
    use_dot = m_rows > 1 if dot is None else dot
    assert use_dot or m_rows == 1
    bn, bk, nw = _config(use_dot, n_rows, k_dim)
    bn, bk, nw = block_n or bn, block_k or bk, num_warps or nw
    if not use_dot:
        return gemv_mod.gemv(x, w, bias, block_n=bn, block_k=bk, num_warps=nw,
                             w_scale=w_scale.reshape(-1))
    y = torch.empty((m_rows, n_rows), dtype=x.dtype, device=x.device)
    _fp8_gemv_kernel[(triton.cdiv(n_rows, bn),)](
        x, w, w_scale.reshape(-1), bias if bias is not None else w_scale, y, m_rows, n_rows, k_dim,
        x.stride(0), w.stride(0), y.stride(0),
        HAS_BIAS=bias is not None, M_PAD=M_PAD, BLOCK_N=bn,
        BLOCK_K=min(bk, max(16, triton.next_power_of_2(k_dim))), num_warps=nw,
        **pdl_args(x.device))
    return y
