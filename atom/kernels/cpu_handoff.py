"""The cpu backend's two seams around its quantized kernels, with as few casts as the kernels'
bf16 allows: the model keeps float32 (the residual stream, attention, the caches), the kernels
take and give bf16, and every cast is an op of a few microseconds at decode sizes (eight a
layer at first, 240 a step for SmolLM2's 30 layers).

- `norm_linear` (a pre-norm block's norm and first projection): the norm's weight is applied
  while rounding into bf16 (one op) and its per-row 1/rms after the matmul, in the multiply
  that also brings the output back to float32. W·(x⊙w·r) = r·(W·(x⊙w)): the same bf16
  rounding of the input up to its scale, so what leaves is what the unfused path gives, in
  float32 as its contract says. Six light ops in place of F.rms_norm (seven ops inside it),
  two casts and the matmul.
- `gated_linear` (a gated MLP's down projection): silu(gate)·up written straight into bf16,
  and the output left in bf16: a block's last projection only ever meets the residual
  stream in an add (the next block's norm seam, the final norm, or a model's own), and the
  add promotes it to the residual's float32 in the same op. The backend's
  block_output_linear (attention's o_proj) leaves its output in bf16 for the same reason.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from atom.kernels.cpu_woq import CpuQuantizedLinear

# Decode batches: their bf16 inputs reuse one buffer per shape (each is read by the next
# kernel and dead after it); larger chunks (prefill) allocate, so no buffer grows with them.
BUFFERED_ROWS = 64


class Bf16Handoff:
    """The buffers and constants the seams reuse, held by one backend (nothing process-wide)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}
        self._eps: dict[float, torch.Tensor] = {}

    def bf16_buffer(self, rows: int, cols: int) -> torch.Tensor:
        if rows > BUFFERED_ROWS:
            return torch.empty(rows, cols, dtype=torch.bfloat16)
        buf = self._buffers.get((rows, cols))
        if buf is None:
            buf = self._buffers[(rows, cols)] = torch.empty(rows, cols, dtype=torch.bfloat16)
        return buf

    def inv_rms(self, x: torch.Tensor, eps: float) -> torch.Tensor:
        """1 / sqrt(mean(x²) + eps) per row of x [T, H], as [T, 1]: eps + |x|²/H in one
        addcmul of the row norms (3 ops, 4.1 us at one row, against 7.8 for the mean of the
        squares)."""
        e = self._eps.get(eps)
        if e is None:
            e = self._eps[eps] = torch.tensor(eps)
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        return torch.addcmul(e, n, n, value=1.0 / x.shape[-1]).rsqrt_()

    def norm_linear(self, x: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                    lin: CpuQuantizedLinear, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """lin(rms_norm(x) · norm_weight) + bias for x [T, H] in float32, returned in x's
        dtype (see the module's docstring)."""
        xw = torch.mul(x, norm_weight, out=self.bf16_buffer(*x.shape))
        y = lin.bf16(xw)
        r = self.inv_rms(x, eps)
        return y * r if bias is None else torch.addcmul(bias, y, r)

    def gated_linear(self, x: torch.Tensor, lin: CpuQuantizedLinear,
                     bias: Optional[torch.Tensor]) -> torch.Tensor:
        """lin(silu(gate) · up) + bias for x = [gate | up] [T, 2I], in bf16 (see the module's
        docstring)."""
        i = x.shape[1] // 2
        # Two narrows, not chunk (which dispatches a split and its slices: 6.6 against 3.6 us).
        act = torch.mul(F.silu(x.narrow(1, 0, i)), x.narrow(1, i, i),
                        out=self.bf16_buffer(x.shape[0], i))
        y = lin.bf16(act)
        return y if bias is None else y + bias
