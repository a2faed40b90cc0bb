from __future__ import annotations

import torch
from torch import nn

from atom.runner.forward_context import backend


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return backend().silu_and_mul(x)
