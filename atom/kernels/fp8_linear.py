"""The fp8 linear on a CUDA GPU: which kernel runs an Fp8Weight at a given row count.

- block-scaled weights (DeepSeek-V3) above one row: the Triton block-scaled GEMM (activations
  quantized per 128-wide group of a token by a launch before it);
- a few rows with dynamic activations (decode; block-scaled weights at one row): the Triton
  fp8 GEMV, which reads the e4m3 weight once for every row (the batch-1 step is bound by the
  weight's bytes). It is weight-only: x stays in its dtype (fp8_reference.weight_only_linear), closer to the
  dequantized model than the W8A8 GEMMs, which round x to e4m3 (fp8_reference.fp8_linear);
- a few rows of a per-channel weight after a norm or a gated activation that the narrow GEMV
  does not fuse (the 8B's gate_up and down at decode): that kernel quantizes its rows per token
  and the W8A8 GEMV (fp8_mma_gemv.py) reads the weight once on the e4m3 tensor cores, x in
  e4m3 as the GEMMs and the CPU emulation round it;
- everything else: e4m3 x e4m3 with a float32 scale per row of x (per token, or the static
  input scale repeated) and per output channel, out bf16: cuBLASLt through `torch._scaled_mm`,
  or the Triton GEMM where it measured faster for the shape and row count (fp8_choice.py).
The Triton kernels live in atom/kernels/triton/fp8_{gemv,mma_gemv,block_gemm,quant}.py. Where one is not
importable (an install without it), the GEMV's rows take `_scaled_mm`, the per-token
quantization the reference's torch ops, and block weights the reference's emulated GEMM
(fp8_reference.py): slower, never different in what is computed.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Optional

import torch

from atom.kernels import fp8_reference
from atom.kernels.fp8_weight import Fp8Weight

# cuBLASLt's fp8 GEMMs need K and N in multiples of 16; other shapes take the reference.
SCALED_MM_ALIGN = 16


def _triton_kernel(name: str) -> Optional[ModuleType]:
    """atom.kernels.triton.<name>, or None where this install has no such kernel."""
    try:
        return importlib.import_module(f"atom.kernels.triton.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"atom.kernels.triton.{name}":
            raise
        return None


def _takes_scaled_mm(w: Fp8Weight) -> bool:
    n, k = w.shape
    return n % SCALED_MM_ALIGN == 0 and k % SCALED_MM_ALIGN == 0


@dataclass(frozen=True)
class Fp8Kernels:
    """The fp8 kernels this install has, looked up once by the backend that owns them."""

    gemv: Optional[ModuleType]
    block_gemm: Optional[ModuleType]
    quant: Optional[ModuleType]
    scaled_gemm: Optional[ModuleType] = None  # the Triton rival of _scaled_mm (fp8_choice.py)
    mma_gemv: Optional[ModuleType] = None  # W8A8 at a few rows for wide weights

    @classmethod
    def load(cls) -> "Fp8Kernels":
        return cls(_triton_kernel("fp8_gemv"), _triton_kernel("fp8_block_gemm"),
                   _triton_kernel("fp8_quant"), _triton_kernel("fp8_scaled_gemm"),
                   _triton_kernel("fp8_mma_gemv"))

    def gemm(self, xq: torch.Tensor, scale_a: torch.Tensor, qweight: torch.Tensor,
             w_scale: torch.Tensor, bias: Optional[torch.Tensor], triton: bool = False
             ) -> torch.Tensor:
        """e4m3 x [M, K] (scale [M, 1]) by e4m3 W [N, K] (scale [N]) → [M, N] bf16, through
        cuBLASLt or, with `triton`, the Triton GEMM. `_scaled_mm` takes mat2 column-major: the
        row-major [N, K] codes transposed are that; its row-wise mode produces bf16 only."""
        bias = None if bias is None else bias.to(torch.bfloat16)
        if triton:
            return self.scaled_gemm.scaled_mm(xq, scale_a, qweight, w_scale, bias,
                                              out_dtype=torch.bfloat16)
        return torch._scaled_mm(xq, qweight.t(), scale_a=scale_a, scale_b=w_scale.view(1, -1),
                                out_dtype=torch.bfloat16, bias=bias)

    def gemv_takes(self, x: torch.Tensor, w: Fp8Weight) -> bool:
        """Whether the weight-only fp8 GEMV serves these rows: per-channel weights at up to 16
        rows, block-scaled ones at one (gemv.py's block scales ride on x; above one row the
        block GEMM, whose x is quantised per 128-group, takes them). gemv.py's fused norm and
        SiLU GEMVs take the same weights (`gemv_scale`)."""
        return (self.gemv is not None and w.input_scale is None
                and (w.weight_scale is not None or x.shape[0] == 1)
                and self.gemv.takes(x, w.qweight))

    @staticmethod
    def gemv_scale(w: Fp8Weight) -> dict[str, torch.Tensor]:
        """The weight's scales as gemv.py's GEMVs take them."""
        if w.weight_scale is not None:
            return {"w_scale": w.weight_scale}
        return {"block_scale": w.block_scale}

    def quant_per_token(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [M, K] → (e4m3 [M, K], float32 [M, 1]): one Triton launch, or the torch ops."""
        if self.quant is not None:
            return self.quant.quant_per_token(x)
        return fp8_reference.quant_per_token(x)

    def scaled_mm(self, x: torch.Tensor, w: Fp8Weight, bias: Optional[torch.Tensor],
                  triton: bool = False) -> torch.Tensor:
        """x [M, K] (bf16) quantized per token (or by the static input scale), then the fp8
        GEMM (`gemm`) → [M, N] bf16."""
        if w.input_scale is None:
            xq, scale_a = self.quant_per_token(x)
        else:
            xq = fp8_reference.quant_static(x, w.input_scale)
            scale_a = w.input_scale.reshape(1, 1).expand(x.shape[0], 1).contiguous()
        return self.gemm(xq, scale_a, w.qweight, w.weight_scale, bias, triton)

    def _fused_quant(self, name: str, x: torch.Tensor, w: Fp8Weight) -> Optional[Callable]:
        """fp8_quant's kernel `name`, which quantizes a projection's input per token as it
        computes it, where that input may feed `w`'s per-token GEMM: per-channel scales, dynamic
        activations, bf16 rows past the GEMV's, a shape cuBLASLt takes. None otherwise."""
        fused = getattr(self.quant, name, None)
        if (fused is None or w.block_scale is not None or w.input_scale is not None
                or x.dim() != 2 or x.dtype != torch.bfloat16 or not _takes_scaled_mm(w)
                or self.gemv_takes(x, w)):
            return None
        return fused

    def mma_takes(self, x: torch.Tensor, w: Fp8Weight, quantizer: str,
                  counters: Optional[torch.Tensor]) -> bool:
        """Whether fp8_quant's `quantizer` (the kernel in front of the projection, quantizing
        its rows per token) and the W8A8 GEMV (fp8_mma_gemv.py) serve these few rows of a
        per-channel weight with dynamic activations, in place of that kernel unquantized and
        the weight-only GEMV. `counters` (the backend's) let a narrow weight split K."""
        return (self.mma_gemv is not None and getattr(self.quant, quantizer, None) is not None
                and w.weight_scale is not None and w.input_scale is None and x.dim() == 2
                and x.dtype == torch.bfloat16 and x.stride(-1) == 1
                and self.mma_gemv.takes(x.shape[0], w.qweight, counters))

    def add_rms_norm_linear(self, x: torch.Tensor, residual: Optional[torch.Tensor],
                            norm_weight: torch.Tensor, eps: float, w: Fp8Weight,
                            bias: Optional[torch.Tensor] = None, triton: bool = False,
                            counters: Optional[torch.Tensor] = None
                            ) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """A pre-norm block's norm and its first projection as backend.add_rms_norm_linear
        defines them, with the norm's output quantized per token by the norm kernel itself
        (fp8_quant.rms_norm_quant: one launch and no bf16 round trip of the normed rows; the
        same bytes as the unfused ops), then the W8A8 GEMV at a few rows (`mma_takes`) or the
        fp8 GEMM. None where that does not apply: block or static
        scales, the other rows the weight-only GEMV takes, shapes cuBLASLt does not take, no
        such kernel."""
        if self.mma_takes(x, w, "rms_norm_quant", counters):
            xq, scale_a, h = self.quant.rms_norm_quant(x, residual, norm_weight, eps, group=None)
            return self.mma_gemv.mma_gemv(xq, scale_a, w.qweight, w.weight_scale, bias,
                                          counters=counters), h
        fused = self._fused_quant("rms_norm_quant", x, w)
        if fused is None:
            return None
        xq, scale_a, h = fused(x, residual, norm_weight, eps, group=None)
        return self.gemm(xq, scale_a, w.qweight, w.weight_scale, bias, triton), h

    def silu_and_mul_linear(self, x: torch.Tensor, w: Fp8Weight,
                            bias: Optional[torch.Tensor] = None, triton: bool = False,
                            counters: Optional[torch.Tensor] = None
                            ) -> Optional[torch.Tensor]:
        """A gated MLP's activation and down projection with the activation quantized per token
        as it is computed (fp8_quant.silu_mul_quant: one launch, no bf16 round trip of the
        [M, I] product; the same bytes as the unfused ops), then the W8A8 GEMV at a few rows
        (`mma_takes`) or the fp8 GEMM. None where that does not apply (`_fused_quant`)."""
        if self.mma_takes(x, w, "silu_mul_quant", counters):
            xq, scale_a = self.quant.silu_mul_quant(x)
            return self.mma_gemv.mma_gemv(xq, scale_a, w.qweight, w.weight_scale, bias,
                                          counters=counters)
        fused = self._fused_quant("silu_mul_quant", x, w)
        if fused is None:
            return None
        xq, scale_a = fused(x)
        return self.gemm(xq, scale_a, w.qweight, w.weight_scale, bias, triton)

    def linear(self, x: torch.Tensor, w: Fp8Weight, bias: Optional[torch.Tensor] = None,
               triton: bool = False) -> torch.Tensor:
        """x [..., K] @ dequantize(w).T (+ bias) on the GPU: what fp8_reference.fp8_linear
        defines; `triton`: the multi-row GEMM is the Triton one (fp8_choice.py). The fp8 GEMMs
        produce bf16 only, so other dtypes take the reference."""
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        if self.gemv_takes(x2, w):
            out = self.gemv.fp8_gemv(x2, w.qweight, w.weight_scale, bias,
                                     block_scale=w.block_scale)
        elif w.block_scale is not None:
            out = (self.block_gemm.fp8_block_gemm(x2, w.qweight, w.block_scale, bias)
                   if self.block_gemm is not None else fp8_reference.fp8_linear(x2, w, bias))
        elif _takes_scaled_mm(w) and x2.dtype == torch.bfloat16:
            out = self.scaled_mm(x2, w, bias, triton)
        else:
            out = fp8_reference.fp8_linear(x2, w, bias)
        return out.view(*lead, w.shape[0])
