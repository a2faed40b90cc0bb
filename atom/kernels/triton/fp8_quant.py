"""Activations to float8 e4m3 with float32 scales: one scale per row (per-token, for the
per-channel-weight fp8 GEMM) or per row and group of columns (per-token-group of 128, as
DeepSeek-V3's block-scaled weights expect).

scale = max(amax / 448, EPS) and q = x * (1 / scale) clamped to ±448, both divisions rounded to
nearest (div_rn: Triton's plain `/` on fp32 is the approximate div.full, which can land an
element one e4m3 step away from torch's), so a torch reference written the same way gets the
same bytes on the GPU. A reciprocal per scale and a multiply per element is what the block
GEMM can afford inside its K loop (fp8_block_gemm quantises x there at decode), and the
kernels here share its arithmetic so both give the same bytes. EPS keeps an all-zero row
finite (its q is zeros).

rms_norm_quant fuses the (residual-add +) RMSNorm in front of a W8A8 projection into the
quantisation, and silu_mul_quant a gated MLP's activation in front of its down projection: one
launch and one read of the row instead of two launches and a bf16 round trip. The fused value
is rounded to the activation dtype before it is quantised, as the unfused kernel's output is,
so both give the same bytes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.activation import silu_mul_cols
from atom.kernels.triton.pdl import pdl_args, pdl_wait
from atom.kernels.triton.rms_norm import load_row, norm_row, norm_warps

EPS = 1e-10


@triton.jit
def scale_of(amax, eps):
    """The dequantisation scale for a group whose largest magnitude is amax."""
    return tl.maximum(tl.math.div_rn(amax, 448.0), eps)


@triton.jit
def quantize(x, scale):
    """x / scale as fp32 e4m3 values (clamped; the caller converts)."""
    q = x * tl.math.div_rn(1.0, scale)
    return tl.minimum(tl.maximum(q, -448.0), 448.0)


@triton.jit
def _row_cols(x_row, cols, mask, k_dim, SILU: tl.constexpr):
    """The row's values at `cols` in float32: x itself, or with SILU silu(gate) * up of a
    [gate | up] row k_dim wide a half."""
    if SILU:
        return silu_mul_cols(x_row, cols, mask, k_dim)
    return tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _per_token_kernel(x_ptr, q_ptr, s_ptr, k_dim, x_stride, q_stride, eps,
                      BLOCK: tl.constexpr, SILU: tl.constexpr, PDL: tl.constexpr):
    """One row per program (with SILU, the activation of a [gate | up] row). A row that fits
    one BLOCK is read once and kept in registers; longer rows take their amax block by block,
    then are read (and activated) again, from L2, to quantise."""
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    if BLOCK >= k_dim:
        cols = tl.arange(0, BLOCK)
        mask = cols < k_dim
        x = _row_cols(x_row, cols, mask, k_dim, SILU)
        scale = scale_of(tl.max(tl.abs(x), 0), eps)
        tl.store(q_ptr + row * q_stride + cols, quantize(x, scale).to(q_ptr.dtype.element_ty),
                 mask=mask)
    else:
        amax = tl.zeros([BLOCK], tl.float32)
        for k0 in range(0, k_dim, BLOCK):
            cols = k0 + tl.arange(0, BLOCK)
            amax = tl.maximum(amax, tl.abs(_row_cols(x_row, cols, cols < k_dim, k_dim, SILU)))
        scale = scale_of(tl.max(amax, 0), eps)
        for k0 in range(0, k_dim, BLOCK):
            cols = k0 + tl.arange(0, BLOCK)
            mask = cols < k_dim
            x = _row_cols(x_row, cols, mask, k_dim, SILU)
            tl.store(q_ptr + row * q_stride + cols,
                     quantize(x, scale).to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row, scale)


@triton.jit
def _per_group_kernel(x_ptr, q_ptr, s_ptr, k_dim, n_groups, x_stride, q_stride, s_stride, eps,
                      GROUP: tl.constexpr, GROUPS: tl.constexpr, PDL: tl.constexpr):
    """GROUPS groups of one row per program, each a [GROUP] slice with its own scale."""
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    cols = g[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = (g[:, None] < n_groups) & (cols < k_dim)
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    scale = scale_of(tl.max(tl.abs(x), 1), eps)
    q = quantize(x, scale[:, None])
    tl.store(q_ptr + row * q_stride + cols, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row * s_stride + g, scale, mask=g < n_groups)


@triton.jit
def _rms_norm_quant_kernel(x_ptr, res_ptr, w_ptr, q_ptr, s_ptr, res_out_ptr, x_stride, res_stride,
                           q_stride, s_stride, res_out_stride, n_cols, eps, q_eps,
                           GROUP: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
                           PDL: tl.constexpr):
    """One row per program, whole in registers (hidden sizes to 16k, as rms_norm.py); GROUP ==
    BLOCK is one scale for the row."""
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    h, cols, mask = load_row(x_ptr, res_ptr, row, x_stride, res_stride, n_cols, HAS_RESIDUAL,
                             BLOCK)
    if HAS_RESIDUAL:
        tl.store(res_out_ptr + row * res_out_stride + cols, h, mask=mask)
    y = norm_row(h, w_ptr, cols, mask, n_cols, eps)
    y = tl.reshape(y.to(x_ptr.dtype.element_ty).to(tl.float32), [BLOCK // GROUP, GROUP])
    scale = scale_of(tl.max(tl.abs(y), 1), q_eps)
    q = quantize(y, scale[:, None])
    tl.store(q_ptr + row * q_stride + tl.reshape(cols, [BLOCK // GROUP, GROUP]),
             q.to(q_ptr.dtype.element_ty), mask=tl.reshape(mask, [BLOCK // GROUP, GROUP]))
    g = tl.arange(0, BLOCK // GROUP)
    tl.store(s_ptr + row * s_stride + g, scale, mask=g * GROUP < n_cols)


def _launch_per_token(x: torch.Tensor, k: int, silu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.shape[0]
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m:
        # Whole rows up to 16k columns (the 8B's 14336-wide down_proj input: 32 fp32 values a
        # thread at 16 warps): the two-pass loop over 4k blocks at 512 rows took 23 µs a launch.
        block = min(16384, triton.next_power_of_2(k))
        _per_token_kernel[(m,)](x, q, scale, k, x.stride(0), q.stride(0), EPS, BLOCK=block,
                                SILU=silu, num_warps=min(16, max(4, block // 512)),
                                **pdl_args(x.device))
    return q, scale


def quant_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [M, K] (bf16, fp16 or fp32, last dim contiguous) → (q [M, K] e4m3, scale [M, 1] fp32)
    with x ≈ q * scale row by row."""
    assert x.dim() == 2 and x.stride(-1) == 1
    return _launch_per_token(x, x.shape[1], silu=False)


def silu_mul_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [M, 2I] a gated MLP's [gate | up] (bf16, fp16 or fp32, last dim contiguous) → (q
    [M, I] e4m3, scale [M, 1] fp32): quant_per_token(silu_and_mul(x)) in one launch."""
    assert x.dim() == 2 and x.stride(-1) == 1 and x.shape[1] % 2 == 0
    return _launch_per_token(x, x.shape[1] // 2, silu=True)


def quant_per_token_group(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [M, K] → (q [M, K] e4m3, scale [M, ceil(K / group)] fp32) with x ≈ q * scale per row
    and group of `group` columns (a power of two); the last group may be partial."""
    assert x.dim() == 2 and x.stride(-1) == 1 and group & (group - 1) == 0
    m, k = x.shape
    n_groups = triton.cdiv(k, group)
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, n_groups), dtype=torch.float32, device=x.device)
    # 8 groups (1024 columns at group 128) per program: a 16-byte load per thread at 4 warps.
    groups = min(triton.next_power_of_2(n_groups), max(1, 1024 // group))
    if m:
        _per_group_kernel[(m, triton.cdiv(n_groups, groups))](
            x, q, scale, k, n_groups, x.stride(0), q.stride(0), scale.stride(0), EPS,
            GROUP=group, GROUPS=groups, num_warps=4, **pdl_args(x.device))
    return q, scale


def rms_norm_quant(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                   eps: float, group: int | None = 128
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, h): rms_norm(h) * weight quantised to e4m3 per row (group=None: scale
    [M, 1]) or per row and group of `group` columns (scale [M, ceil(K / group)]), where h =
    x + residual (x itself without one), in x's dtype: the next layer's residual."""
    assert x.dim() == 2 and x.stride(-1) == 1 and (group is None or group & (group - 1) == 0)
    m, k = x.shape
    block = triton.next_power_of_2(k)
    g = block if group is None else min(group, block)
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, 1 if group is None else triton.cdiv(k, group)), dtype=torch.float32,
                        device=x.device)
    h = torch.empty_like(x) if residual is not None else x
    res = residual if residual is not None else x
    if m:
        _rms_norm_quant_kernel[(m,)](
            x, res, weight, q, scale, h, x.stride(0), res.stride(0), q.stride(0), scale.stride(0),
            h.stride(0), k, eps, EPS, GROUP=g, HAS_RESIDUAL=residual is not None, BLOCK=block,
            num_warps=norm_warps(block), **pdl_args(x.device))
    return q, scale, h
