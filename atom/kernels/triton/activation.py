"""SiLU-and-mul for gated MLPs: reads the [T, 2I] gate_up output once, writes [T, I]."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.kernels.triton.pdl import pdl_args, pdl_wait


@triton.jit
def silu_mul_cols(x_row, cols, mask, inter):
    """silu(gate) * up at `cols` of one [gate | up] row, rounded as the reference rounds it (silu
    in the activation dtype, then the product in that dtype), returned in float32. Masked
    columns are 0."""
    a = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + inter + cols, mask=mask, other=0.0)
    s = (a / (1.0 + tl.exp(-a))).to(b.dtype)
    return (s.to(tl.float32) * b.to(tl.float32)).to(b.dtype).to(tl.float32)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_stride, out_stride, inter, BLOCK: tl.constexpr,
                         PDL: tl.constexpr):
    pdl_wait(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    y = silu_mul_cols(x_ptr + row * x_stride, cols, mask, inter)
    tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [..., 2I] → silu(x[..., :I]) * x[..., I:]."""
    assert x.stride(-1) == 1
    inter = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    out = torch.empty((x2.shape[0], inter), dtype=x.dtype, device=x.device)
    block = min(triton.next_power_of_2(inter), 1024)
    if x2.shape[0] > 0:
        grid = (x2.shape[0], triton.cdiv(inter, block))
        _silu_and_mul_kernel[grid](x2, out, x2.stride(0), out.stride(0), inter, BLOCK=block, num_warps=4,
                                   **pdl_args(x.device))
    return out.view(*x.shape[:-1], inter)
