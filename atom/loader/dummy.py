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
        put = getattr(p, "put_dense_expert", None)
        if put is not None:  # fp8 experts: each expert's values made in float, then quantized
            for e in range(p.shape[0]):
                put(e, _fill(torch.empty(p.shape[1:], device=p.device), kind, name, gen))
        else:
            _fill(p.data, kind, name, gen)


def _fill(t: torch.Tensor, kind: str, name: str, gen: torch.Generator) -> torch.Tensor:
    if kind == "zero" or not t.is_floating_point():
        # Integer tensors are tables (EAGLE-3's d2t: target id = draft id + d2t[draft id]):
        # zeros are a valid one (the draft's ids are the target's first ones), random ints not.
        t.zero_()
    elif t.dim() >= 2:
        fan_in, fan_out = t.shape[-1], t.shape[-2]
        bound = (6.0 / (fan_in + fan_out)) ** 0.5
        if t.device.type == "cpu":
            t.copy_(torch.rand(t.shape, generator=gen) * 2 * bound - bound)
        else:
            t.uniform_(-bound, bound)
    elif "norm" in name:
        t.fill_(1.0)
    else:
        t.uniform_(-0.02, 0.02)
    return t
