"""RMSNorm and fused residual-add + RMSNorm: one pass over each row instead of torch's three.

One program owns one row so the reduction never leaves registers; hidden sizes up to 16k fit in
one block, which covers every dense model we serve.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait


@triton.jit
def load_row(x_ptr, res_ptr, row, x_stride, res_stride, n_cols, HAS_RESIDUAL: tl.constexpr,
             BLOCK: tl.constexpr):
    """(h, cols, mask): one row, plus its residual when there is one, zero past n_cols. The sum
    is rounded to the activation dtype first: the next layer's residual is that value. It
    stores nothing: under torch.compile, inductor learns which tensors a Triton kernel writes
    from the kernel's own stores, so each kernel stores the residual itself (on the H200 the
    compiled level-3 forward broke at the commit that moved this store into a helper)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
    return x, cols, mask


@triton.jit
def norm_row(h, w_ptr, cols, mask, n_cols, eps):
    """h's RMSNorm in fp32 (load_row's h); fp8_quant's fused norm + quantisation shares it."""
    xf = h.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return xf * rstd * w


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, x_stride, res_stride, out_stride,
                     res_out_stride, n_cols, eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
                     PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    h, cols, mask = load_row(x_ptr, res_ptr, row, x_stride, res_stride, n_cols, HAS_RESIDUAL,
                             BLOCK)
    if HAS_RESIDUAL:
        tl.store(res_out_ptr + row * res_out_stride + cols, h, mask=mask)
    y = norm_row(h, w_ptr, cols, mask, n_cols, eps)
    tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def norm_warps(block: int) -> int:
    """256 columns a warp (8 per thread), at most 16 warps."""
    return min(max(block // 256, 1), 16)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float):
    assert x.stride(-1) == 1, "rms_norm needs a contiguous last dim"
    x2 = x.reshape(-1, x.shape[-1])
    n_rows, n_cols = x2.shape
    out = torch.empty_like(x2)
    res_out = torch.empty_like(x2) if residual is not None else out
    res2 = residual.reshape(-1, n_cols) if residual is not None else x2
    block = triton.next_power_of_2(n_cols)
    num_warps = norm_warps(block)
    if n_rows > 0:
        _rms_norm_kernel[(n_rows,)](x2, res2, weight, out, res_out, x2.stride(0), res2.stride(0),
                                    out.stride(0), res_out.stride(0), n_cols, eps,
                                    HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=num_warps,
                                    **pdl_args(x.device))
    return out.view(x.shape), res_out.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _launch(x, None, weight, eps)[0]


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) with one read of each input and one write of each output."""
    return _launch(x, residual, weight, eps)
