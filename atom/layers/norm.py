from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from atom.runner.forward_context import backend


class RMSNorm(nn.Module):
    """RMSNorm; with a residual, the add and the norm are one op (fused on GPU backends)."""

    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        if residual is None:
            return backend().rms_norm(x, self.weight, self.eps)
        return backend().fused_add_rms_norm(x, residual, self.weight, self.eps)
