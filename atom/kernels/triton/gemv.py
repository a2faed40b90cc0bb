"""y = x @ W.T (+ b) for a single row x: the decode-time linear of one sequence.

At M = 1 a linear is a pure weight stream, and cuBLAS reaches only 1.7–2.2 TB/s on the 8B
attention projections (H200: qkv 2.0, o_proj 1.7, down 2.8 TB/s against a 4.18 TB/s copy).
Here each program owns BLOCK_N whole rows and streams them along K with 16-byte loads, no
split-K and so no second pass or atomics: one launch, bf16 out, fp32 accumulation.

A gated MLP's down projection can take the [gate | up] row itself (SILU_GATE): every program
applies silu(gate) * up to the slice of x it is about to use, so SiLU-and-mul costs no launch
of its own. x is tiny and L2-resident; recomputing it per program is cheaper than a launch.

The projection that follows a decoder layer's (residual-add +) RMSNorm can take the norm too
(RMS_NORM): every program reads x (and the residual) as it streams its rows, sums h² on the way,
and scales its dot products by 1/rms(h) at the end, so the norm costs no launch and no pass of
its own. Program 0 writes h = x + residual, the next layer's residual. The normalised row is
never rounded to bf16 here (the unfused kernel rounds it), a difference within bf16 noise.

An fp8 e4m3 weight with one fp32 scale per row (HAS_SCALE, `w_scale`) streams the same way at
half the bytes: its elements go to fp32 as they arrive and the scale multiplies the finished
dot, so every fusion above serves fp8 weights too (fp8_gemv.py is the entry for them). A
block-scaled one (HAS_BLOCK_SCALE, `block_scale`: one scale per 128 × 128 block, DeepSeek-V3's
`weight_scale_inv`) takes its scales into x instead: a program's BLOCK_N rows divide 128, so
they share one row of block scales, and x[c] · s[row block, c // 128] dots the codes to the
dequantized weight's product with no per-element multiply more (weight-only, as at one row
per channel).

Under PDL (pdl.py) the first weight tile loads before the wait, overlapping the kernel in front:
the weight must be one no kernel of the step writes (a model's parameter), x only after the
wait. On the H200 that took batch-1 8B decode from 234.5 to 239.5 tok/s bf16.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait


@triton.jit
def _load_x(x_ptr, cols, c_mask, k_dim, SILU_GATE: tl.constexpr):
    """x[cols] in fp32; with SILU_GATE, silu(x[cols]) * x[k_dim + cols] rounded as the unfused
    silu_and_mul rounds it (silu, then the product, each to the activation dtype)."""
    if SILU_GATE:
        a = tl.load(x_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)
        b = tl.load(x_ptr + k_dim + cols, mask=c_mask, other=0.0)
        s = (a / (1.0 + tl.exp(-a))).to(b.dtype)
        return (s.to(tl.float32) * b.to(tl.float32)).to(b.dtype).to(tl.float32)
    return tl.load(x_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)


@triton.jit
def _step(w, cols, x_ptr, res_ptr, res_out_ptr, norm_w_ptr, bs_row, pid, k_dim, acc, sq,
          SILU_GATE: tl.constexpr, RMS_NORM: tl.constexpr, HAS_BLOCK_SCALE: tl.constexpr,
          HAS_RESIDUAL: tl.constexpr):
    """One K step of the rows' weight tile w against x's (normed / activated) columns."""
    c_mask = cols < k_dim
    if RMS_NORM:
        h = tl.load(x_ptr + cols, mask=c_mask, other=0.0)
        if HAS_RESIDUAL:
            # Rounded to the activation dtype: the next layer's residual is that value.
            r = tl.load(res_ptr + cols, mask=c_mask, other=0.0)
            h = (h.to(tl.float32) + r.to(tl.float32)).to(h.dtype)
            if pid == 0:
                tl.store(res_out_ptr + cols, h, mask=c_mask)
        hf = h.to(tl.float32)
        sq += hf * hf
        x = hf * tl.load(norm_w_ptr + cols, mask=c_mask, other=0.0).to(tl.float32)
    else:
        x = _load_x(x_ptr, cols, c_mask, k_dim, SILU_GATE)
    if HAS_BLOCK_SCALE:
        x = x * tl.load(bs_row + cols // 128, mask=c_mask, other=0.0)
    return acc + w.to(tl.float32) * x[None, :], sq


@triton.jit
def _load_w(w_rows, cols, r_mask, k_dim):
    """The rows' weight tile at `cols`, streamed once (evicted first)."""
    return tl.load(w_rows + cols[None, :], mask=r_mask[:, None] & (cols < k_dim)[None, :],
                   other=0.0, eviction_policy="evict_first")


# bs_stride (a block-scaled weight's ceil(K / 128)) would otherwise make a variant per
# divisibility of each weight's K.
@triton.jit(do_not_specialize=["bs_stride"])
def _gemv_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, k_dim, w_stride,
                 res_ptr, norm_w_ptr, res_out_ptr, eps, s_ptr, bs_stride,
                 HAS_BIAS: tl.constexpr, SILU_GATE: tl.constexpr, RMS_NORM: tl.constexpr,
                 HAS_SCALE: tl.constexpr, HAS_BLOCK_SCALE: tl.constexpr,
                 HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PDL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    r_mask = rows < n_rows
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * w_stride
    bs_row = s_ptr + ((pid * BLOCK_N) // 128) * bs_stride
    cols = tl.arange(0, BLOCK_K)
    w = _load_w(w_rows, cols, r_mask, k_dim)  # before the wait: the module doc says why
    pdl_wait(PDL)
    acc, sq = _step(w, cols, x_ptr, res_ptr, res_out_ptr, norm_w_ptr, bs_row, pid, k_dim,
                    tl.zeros([BLOCK_N, BLOCK_K], tl.float32), tl.zeros([BLOCK_K], tl.float32),
                    SILU_GATE, RMS_NORM, HAS_BLOCK_SCALE, HAS_RESIDUAL)
    for k0 in range(BLOCK_K, k_dim, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        w = _load_w(w_rows, cols, r_mask, k_dim)
        acc, sq = _step(w, cols, x_ptr, res_ptr, res_out_ptr, norm_w_ptr, bs_row, pid, k_dim,
                        acc, sq, SILU_GATE, RMS_NORM, HAS_BLOCK_SCALE, HAS_RESIDUAL)
    y = tl.sum(acc, 1)
    if RMS_NORM:
        y = y / tl.sqrt(tl.sum(sq, 0) / k_dim + eps)
    if HAS_SCALE:
        y *= tl.load(s_ptr + rows, mask=r_mask, other=0.0)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=r_mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=r_mask)


def _config(n_rows: int, k_dim: int, rms_norm: bool = False) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) from gpu_bench's gemv_sweep on the H200 (TB/s, cuBLAS → this):
    narrow outputs (N ≤ 2048: Qwen3-0.6B o_proj 0.33 → 1.21, down 0.82 → 1.49) want 4-row
    blocks and 8 warps for more programs and longer streams; long K (8B down_proj) 8 warps;
    everything else 8 rows × 512 (8B qkv 2.57 → 3.05, o_proj 2.26 → 2.71). The gemv_sweep
    (with PDL): 4096 rows of K ≥ 4096 (8B o_proj, down_proj) stream faster as
    16 rows × 1024 (o_proj 2.81 → 2.97, down 3.42 → 3.46). With the norm fused in, every
    program re-reads x, the residual and the norm weight, and above 4096 rows 16-row blocks
    halve those re-reads (fused_gemv: 8B qkv 19.95 → 16.78 µs, 0.6B gate_up 6.22 → 5.73)."""
    if n_rows <= 2048:
        return 4, 1024, 8
    if n_rows <= 4096 and k_dim >= 4096:
        return 16, 1024, 8
    bn, bk, nw = (8, 512, 8) if k_dim >= 8192 else (8, 512, 4)
    return (16 if rms_norm and n_rows > 4096 else bn), bk, nw


def takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the GEMV serves this linear: one bf16/fp16 row on the GPU; cuBLAS is better
    from two rows on, and the CPU has no Triton."""
    return (x.dim() == 2 and x.shape[0] == 1 and x.is_cuda and x.stride(-1) == 1
            and weight.stride(-1) == 1 and x.dtype in (torch.bfloat16, torch.float16))


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         silu_gate: bool = False, block_n: int | None = None, block_k: int | None = None,
         num_warps: int | None = None, w_scale: torch.Tensor | None = None,
         block_scale: torch.Tensor | None = None) -> torch.Tensor:
    """x: [1, K] or [K] ([1, 2K] = [gate | up] with silu_gate); weight: [N, K] (nn.Linear
    layout, last dim contiguous; e4m3 with w_scale [N] or block_scale [ceil(N/128),
    ceil(K/128)] fp32) → [1, N]."""
    assert weight.stride(-1) == 1
    n_rows, k_dim = weight.shape
    xv = x.reshape(-1)
    assert xv.numel() == (2 if silu_gate else 1) * k_dim and xv.stride(0) == 1
    y = torch.empty((1, n_rows), dtype=x.dtype, device=x.device)
    _launch(xv, weight, bias, y, silu_gate=silu_gate, block_n=block_n, block_k=block_k,
            num_warps=num_warps, w_scale=w_scale, block_scale=block_scale)
    return y


def add_rms_norm_gemv(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                      eps: float, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      block_n: int | None = None, block_k: int | None = None,
                      num_warps: int | None = None, w_scale: torch.Tensor | None = None,
                      block_scale: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(linear(rms_norm(x + residual)), x + residual) for one row x: [1, K], in one launch;
    without a residual, h is x itself. An e4m3 weight comes with w_scale [N] or block_scale
    fp32."""
    assert weight.stride(-1) == 1 and x.stride(-1) == 1
    n_rows, k_dim = weight.shape
    y = torch.empty((1, n_rows), dtype=x.dtype, device=x.device)
    h = torch.empty_like(x) if residual is not None else x
    _launch(x.reshape(-1), weight, bias, y, residual=residual, norm_weight=norm_weight, eps=eps,
            res_out=h, block_n=block_n, block_k=block_k, num_warps=num_warps, w_scale=w_scale,
            block_scale=block_scale)
    return y, h


def _launch(xv: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor,
            silu_gate: bool = False, residual: torch.Tensor | None = None,
            norm_weight: torch.Tensor | None = None, eps: float = 0.0,
            res_out: torch.Tensor | None = None, block_n: int | None = None,
            block_k: int | None = None, num_warps: int | None = None,
            w_scale: torch.Tensor | None = None,
            block_scale: torch.Tensor | None = None) -> None:
    n_rows, k_dim = weight.shape
    scaled = (w_scale is not None) + (block_scale is not None)
    assert scaled == (weight.dtype == torch.float8_e4m3fn)
    bn, bk, nw = _config(n_rows, k_dim, norm_weight is not None)
    bn, bk, nw = block_n or bn, block_k or bk, num_warps or nw
    if block_scale is not None:
        assert 128 % bn == 0 and block_scale.stride(-1) == 1
        assert block_scale.shape == (triton.cdiv(n_rows, 128), triton.cdiv(k_dim, 128))
    scale = w_scale if w_scale is not None else block_scale
    _gemv_kernel[(triton.cdiv(n_rows, bn),)](
        xv, weight, bias if bias is not None else weight, y, n_rows, k_dim, weight.stride(0),
        residual if residual is not None else xv, norm_weight if norm_weight is not None else xv,
        res_out if res_out is not None else xv, eps, scale if scale is not None else xv,
        block_scale.stride(0) if block_scale is not None else 0,
        HAS_BIAS=bias is not None, SILU_GATE=silu_gate, RMS_NORM=norm_weight is not None,
        HAS_SCALE=w_scale is not None, HAS_BLOCK_SCALE=block_scale is not None,
        HAS_RESIDUAL=residual is not None, BLOCK_N=bn,
        BLOCK_K=min(bk, triton.next_power_of_2(k_dim)), num_warps=nw, **pdl_args(y.device))
