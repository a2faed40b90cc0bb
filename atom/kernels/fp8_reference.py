"""The fp8 linear as the GPU computes it, in float32: the oracle for the fp8 kernels and the
path of the torch and cpu backends.

A GPU fp8 GEMM multiplies e4m3 activations by e4m3 weights and scales the float32 sums; the
only approximation beyond the checkpoint's is the activations' rounding to e4m3. So the
reference quantizes activations exactly as the kernels do (dynamic per token: amax / 448;
per 128-wide group of a token with block-scaled weights; or the checkpoint's static scale),
dequantizes both operands and multiplies in float32: equal to the kernels' result up to the
order of float32 sums.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from atom.kernels.fp8_weight import BLOCK, E4M3, E4M3_MAX, Fp8Weight, e4m3_scale

# The Triton quantizers' arithmetic (atom/kernels/triton/fp8_quant.py), so both give the same
# bytes: scale = max(amax / 448, EPS) correctly rounded (fp8_weight.e4m3_scale, the kernels'
# div_rn), codes = x * (1 / scale) clamped, every division rounded to nearest. EPS keeps an
# all-zero row finite.
ACT_EPS = 1e-10


def _codes(xf: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (xf * (1.0 / scale)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def quant_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (e4m3 [M, K], scale [M, 1] float32) with x ≈ codes * scale."""
    xf = x.float()
    scale = e4m3_scale(xf.abs().amax(dim=-1, keepdim=True), ACT_EPS)
    return _codes(xf, scale), scale


def quant_per_group(x: torch.Tensor, group: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (e4m3 [M, K], scale [M, ceil(K / group)] float32), one scale per token and
    group of `group` input features (the last group may be partial)."""
    m, k = x.shape
    g = -(-k // group)
    xf = x.new_zeros(m, g * group, dtype=torch.float32)
    xf[:, :k] = x.float()
    tiles = xf.view(m, g, group)
    scale = e4m3_scale(tiles.abs().amax(dim=-1), ACT_EPS)
    return _codes(tiles, scale.unsqueeze(-1)).view(m, g * group)[:, :k], scale


def quant_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale in e4m3 (saturating): activations with a checkpoint's static input_scale."""
    return (x.float() / scale.float()).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def quantized_activations(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """x [M, K] as the fp8 GEMM for w sees it, dequantized to float32."""
    if w.block_scale is not None:
        codes, scale = quant_per_group(x)
        return codes.float() * scale.repeat_interleave(BLOCK, 1)[:, :x.shape[1]]
    if w.input_scale is not None:
        return quant_static(x, w.input_scale).float() * w.input_scale.float()
    codes, scale = quant_per_token(x)
    return codes.float() * scale


def _emulated(x: torch.Tensor, w: Fp8Weight, dense: torch.Tensor,
              bias: Optional[torch.Tensor]) -> torch.Tensor:
    lead = x.shape[:-1]
    out = quantized_activations(x.reshape(-1, x.shape[-1]), w) @ dense.t()
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).view(*lead, w.shape[0])


def fp8_linear(x: torch.Tensor, w: Fp8Weight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [..., K] @ dequantize(w).T (+ bias), in x's dtype."""
    return _emulated(x, w, w.dequantize(torch.float32), bias)


def weight_only_linear(x: torch.Tensor, w: Fp8Weight,
                       bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] @ dequantize(w).T (+ bias) with x unrounded: what the few-row fp8 GEMV computes
    (it reads x in its own dtype; fp8_linear.py)."""
    out = x.float() @ w.dequantize(torch.float32).t()
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


@dataclass
class EmulatedFp8Linear:
    """The torch and cpu backends' prepared fp8 weight: the weight dequantized once at load
    (float32, exact), the activations rounded to e4m3 per call. Converting e4m3 on the CPU
    costs more than the matmul, so dequantizing every call made SmolLM2's decode ~10x slower."""

    fp8: Fp8Weight
    dense: torch.Tensor  # [N, K] float32: fp8.dequantize()

    @classmethod
    def of(cls, w: Fp8Weight) -> "EmulatedFp8Linear":
        w = w.contiguous()
        return cls(w, w.dequantize(torch.float32))

    def __call__(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        return _emulated(x, self.fp8, self.dense, bias)
