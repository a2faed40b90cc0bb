"""Dummy weights at real shapes, for speed work without a checkpoint (`load.dummy`).

empty: leave memory uninitialized; zero: all zeros; xavier: xavier-uniform for matrices (norm
weights stay at one) — never zeros for speed numbers, which zeros can flatter.
"""
from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def fill_dummy(model: nn.Module, kind: str, seed: int = 0) -> None:
    if kind == "empty":
        return
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, p in model.named_parameters():
        if kind == "zero":
            p.zero_()
        elif p.dim() >= 2:
            fan_in, fan_out = p.shape[-1], p.shape[-2]
            bound = (6.0 / (fan_in + fan_out)) ** 0.5
            if p.device.type == "cpu":
                p.copy_(torch.rand(p.shape, generator=gen) * 2 * bound - bound)
            else:
                p.uniform_(-bound, bound)
        elif "norm" in name:
            p.fill_(1.0)
        else:
            p.uniform_(-0.02, 0.02)
