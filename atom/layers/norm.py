from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from atom.layers.linear import ColumnParallelLinear
from atom.layers.model_context import ModelContext


class RMSNorm(nn.Module):
    """RMSNorm; with a residual, the add and the norm are one op (fused on GPU backends)."""

    def __init__(self, mc: ModelContext, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.backend = mc.backend
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        if residual is None:
            return self.backend.rms_norm(x, self.weight, self.eps)
        return self.backend.fused_add_rms_norm(x, residual, self.weight, self.eps)

    def project(self, x: torch.Tensor, residual: Optional[torch.Tensor],
                proj: ColumnParallelLinear) -> tuple[torch.Tensor, torch.Tensor]:
        """(proj(norm(h)), h) with h = x + residual (x alone in the first layer): a pre-norm
        block's norm and first projection as one backend op, which the GPU backend fuses at
        batch-1 decode. Column-parallel only: its input is whole on every rank."""
        return self.backend.add_rms_norm_linear(x, residual, self.weight, self.eps, proj.weight,
                                             proj.bias)
