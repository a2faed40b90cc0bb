"""y = (x @ W_q.T) * w_scale (+ b) for a few rows x (decode, M ≤ 16) and an fp8 e4m3 weight
with one float32 scale per output row, or one per 128 × 128 block (DeepSeek-V3's
`weight_scale_inv`): weight-only fp8, x stays bf16.

Few rows make a linear a weight stream, and e4m3 halves its bytes. Each program owns BLOCK_N
whole rows and streams them along K with 16-byte loads (16 e4m3 per thread and load), no
split-K, one launch; the bytes are converted in registers and the per-row scale multiplies the
finished dot. With block scales (HAS_BLOCK_SCALE) a program's rows lie in one 128-row scale
block (BLOCK_N divides 128), so each 128 columns of a K step are one dot of their own, scaled
by that block's one scale as it joins the fp32 accumulator: the loads stay 16 bytes wide (a
chunk's row is 8 of them), and the scales cost one multiply per accumulator element and 128
columns, none per weight element. At 2..16 rows this replaces the block GEMM's two launches
(x quantised per 128-group, then a GEMM tiled for many rows), and x is not rounded to e4m3.

- One row: gemv.py's kernel (HAS_SCALE or HAS_BLOCK_SCALE), every element to fp32 and an FMA,
  exact and range-safe; its norm and SiLU fusions serve fp8 weights the same way.
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
from atom.kernels.triton.pdl import pdl_args, pdl_wait

MAX_ROWS = 16
M_PAD = 16  # tl.dot's smallest N
SCALE_BLOCK = 128  # a block-scaled weight's scale blocks: 128 x 128 (fp8_weight.BLOCK)


# bs_stride (a block-scaled weight's ceil(K / 128)) would otherwise make a variant per
# divisibility of each weight's K.
@triton.jit(do_not_specialize=["bs_stride"])
def _fp8_gemv_kernel(x_ptr, w_ptr, s_ptr, b_ptr, y_ptr, m_rows, n_rows, k_dim,
                     x_stride, w_stride, y_stride, bs_stride,
                     HAS_BIAS: tl.constexpr, HAS_BLOCK_SCALE: tl.constexpr, M_PAD: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    pdl_wait(PDL)
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    r_mask = rows < n_rows
    ms = tl.arange(0, M_PAD)
    m_mask = ms < m_rows
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * w_stride
    bs_row = s_ptr + ((pid * BLOCK_N) // 128) * bs_stride
    CHUNK: tl.constexpr = 128 if HAS_BLOCK_SCALE else BLOCK_K
    acc = tl.zeros([BLOCK_N, M_PAD], tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):
        for j in tl.static_range(BLOCK_K // CHUNK):
            c0 = k0 + j * CHUNK
            cols = c0 + tl.arange(0, CHUNK)
            c_mask = cols < k_dim
            w = tl.load(w_rows + cols[None, :], mask=r_mask[:, None] & c_mask[None, :],
                        other=0.0, eviction_policy="evict_first")
            x = tl.load(x_ptr + ms[:, None] * x_stride + cols[None, :],
                        mask=m_mask[:, None] & c_mask[None, :], other=0.0)
            if HAS_BLOCK_SCALE:
                acc += (tl.dot(w.to(tl.float16), tl.trans(x.to(tl.float16)))
                        * tl.load(bs_row + c0 // 128, mask=c0 < k_dim, other=0.0))
            else:
                acc = tl.dot(w.to(tl.float16), tl.trans(x.to(tl.float16)), acc)
    if HAS_BLOCK_SCALE:
        y = acc
    else:
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
    registers; block-scaled weights take the same (16 and 32 rows divide a scale block, and
    a 256-column step is two of its columns' blocks)."""
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
    """x: [M, K] (M ≤ 16), w: [N, K] e4m3, w_scale: [N] fp32 → [M, N] in x's dtype; or
    block_scale [ceil(N/128), ceil(K/128)] fp32 in place of w_scale. `dot` and the block sizes
    override the defaults (benchmarks sweep them)."""
    m_rows, k_dim = x.shape
    n_rows = w.shape[0]
    assert 1 <= m_rows <= MAX_ROWS and w.shape[1] == k_dim and w.dtype == torch.float8_e4m3fn
    assert x.stride(-1) == 1 and w.stride(-1) == 1 and (w_scale is None) != (block_scale is None)
    if w_scale is not None:
        w_scale = w_scale.reshape(-1)
        assert w_scale.numel() == n_rows
    else:
        assert block_scale.stride(-1) == 1 and block_scale.dtype == torch.float32
        blocks = (triton.cdiv(n_rows, SCALE_BLOCK), triton.cdiv(k_dim, SCALE_BLOCK))
        assert block_scale.shape == blocks
    use_dot = m_rows > 1 if dot is None else dot
    assert use_dot or m_rows == 1
    bn, bk, nw = _config(use_dot, n_rows, k_dim)
    bn, bk, nw = block_n or bn, block_k or bk, num_warps or nw
    if not use_dot:
        return gemv_mod.gemv(x, w, bias, block_n=bn, block_k=bk, num_warps=nw, w_scale=w_scale,
                             block_scale=block_scale)
    return _dot(x, w, w_scale, block_scale, bias, bn, bk, nw)


def _dot(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor | None,
         block_scale: torch.Tensor | None, bias: torch.Tensor | None, block_n: int,
         block_k: int, num_warps: int) -> torch.Tensor:
    """The tensor-core kernel's launch. With block scales a program's rows must lie in one
    scale block (BLOCK_N divides 128) and each K step be whole 128-column blocks, one dot and
    one scale each."""
    m_rows, k_dim = x.shape
    n_rows = w.shape[0]
    block_k = min(block_k, max(16, triton.next_power_of_2(k_dim)))
    if block_scale is not None:
        block_k = max(block_k, SCALE_BLOCK)
        assert SCALE_BLOCK % block_n == 0 and block_k % SCALE_BLOCK == 0
    scale = w_scale if w_scale is not None else block_scale
    y = torch.empty((m_rows, n_rows), dtype=x.dtype, device=x.device)
    _fp8_gemv_kernel[(triton.cdiv(n_rows, block_n),)](
        x, w, scale, bias if bias is not None else scale, y, m_rows, n_rows, k_dim,
        x.stride(0), w.stride(0), y.stride(0),
        block_scale.stride(0) if block_scale is not None else 0,
        HAS_BIAS=bias is not None, HAS_BLOCK_SCALE=block_scale is not None, M_PAD=M_PAD,
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, **pdl_args(x.device))
    return y
