"""A weight that stays quantized: integer (or low-precision) codes with per-group scales.

The seam between checkpoint formats and kernels. A loader describes what it read (GGUF blocks)
as `codes * scale + zero` over groups of `group_size` input features, or an fp8 checkpoint's
codes and scales as an Fp8Weight (fp8_weight.py: its scales are per channel or per 2-D block,
and it carries how its activations are scaled); a linear layer keeps that description; the kernel backend turns it into whatever its
kernels take (`KernelBackend.prepare_weight`), or dequantizes it when it has no kernel for it.
`dequantize` is the oracle: bit-for-bit what the checkpoint format's reference decoder gives.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch

from atom.kernels.fp8_weight import Fp8Weight, cat_fp8_rows


@dataclass
class QuantizedWeight:
    method: str  # where the codes came from, e.g. "gguf:Q4_1"; kernels key on the fields below
    codes: torch.Tensor  # [N, K] integer codes (int8 / uint8 / int16) or fp8 values
    scales: torch.Tensor  # [N, K // group_size] float32
    zeros: Optional[torch.Tensor]  # [N, K // group_size] float32 added after scaling, or None
    group_size: int
    # The codes the format can hold (not the ones present): kernels size their packing by it,
    # so a kernel's choice never depends on the values one checkpoint happens to contain.
    code_min: int
    code_max: int

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """codes * scale (+ zero) in float32, in the order GGUF's reference decoders use."""
        g = self.group_size
        n, k = self.codes.shape
        w = self.codes.float().view(n, k // g, g) * self.scales.unsqueeze(-1)
        if self.zeros is not None:
            w = w + self.zeros.unsqueeze(-1)
        return w.view(n, k).to(dtype)

    def rows(self, start: int, length: int) -> "QuantizedWeight":
        return QuantizedWeight(self.method, self.codes.narrow(0, start, length),
                               self.scales.narrow(0, start, length),
                               None if self.zeros is None else self.zeros.narrow(0, start, length),
                               self.group_size, self.code_min, self.code_max)

    def columns(self, start: int, length: int) -> "QuantizedWeight":
        """Input features [start, start + length): a row-parallel shard (group aligned)."""
        g = self.group_size
        if start % g or length % g:
            raise ValueError(f"a {self.method} shard must start and end on a {g}-wide group")
        return QuantizedWeight(self.method, self.codes.narrow(1, start, length),
                               self.scales.narrow(1, start // g, length // g),
                               None if self.zeros is None else self.zeros.narrow(1, start // g, length // g),
                               g, self.code_min, self.code_max)

    def permute_rows(self, order: torch.Tensor) -> "QuantizedWeight":
        return QuantizedWeight(self.method, self.codes[order], self.scales[order],
                               None if self.zeros is None else self.zeros[order], self.group_size,
                               self.code_min, self.code_max)


Quantized = Union[QuantizedWeight, Fp8Weight]
QUANTIZED = (QuantizedWeight, Fp8Weight)  # for isinstance: what a linear layer keeps as loaded


def cat_rows(parts: list) -> Quantized:
    """Stack weights along output features (q | k | v, gate | up) even when the parts come in
    different formats (a Q4_K_M file stores v as Q6_K): groups become the finest group among
    them (a scale repeated per sub-group is exact) and codes widen to a common type."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], Fp8Weight):
        return cat_fp8_rows(parts)
    g = math.gcd(*(p.group_size for p in parts))
    same = all(p.method == parts[0].method for p in parts)
    dtype = parts[0].codes.dtype if same else torch.int16
    method = parts[0].method if same else "mixed:" + "+".join(sorted({p.method for p in parts}))

    def regroup(t: torch.Tensor, p: QuantizedWeight) -> torch.Tensor:
        return t.repeat_interleave(p.group_size // g, dim=1) if p.group_size != g else t

    has_zeros = any(p.zeros is not None for p in parts)
    zeros = None
    if has_zeros:
        zeros = torch.cat([regroup(p.zeros if p.zeros is not None else torch.zeros_like(p.scales), p)
                           for p in parts])
    return QuantizedWeight(method, torch.cat([p.codes.to(dtype) for p in parts]),
                           torch.cat([regroup(p.scales, p) for p in parts]), zeros, g,
                           min(p.code_min for p in parts), max(p.code_max for p in parts))
