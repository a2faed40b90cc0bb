"""Stacked expert weights [E, N, K] as fp8 e4m3 codes with float32 scales, the two layouts the
fused MoE kernel takes: one scale per output channel ([E, N]) or per 128 × 128 block
([E, ceil(N/128), ceil(K/128)], DeepSeek-V3's `weight_scale_inv` stacked over experts).

Each expert's slice is an Fp8Weight (fp8_weight.py), so quantization, sharding and the
dequantizing oracle are that type's, not copies of them. One expert at a time: R1's w13
[256, 4096, 7168] in float32 would be 30 GB.
"""
from __future__ import annotations

import torch

from atom.kernels.fp8_weight import BLOCK, E4M3, Fp8Weight, quantize

FORMATS = ("channel", "block")  # ModelContext.fp8_experts


def scale_shape(experts: int, n: int, k: int, block: bool) -> tuple[int, ...]:
    return (experts, -(-n // BLOCK), -(-k // BLOCK)) if block else (experts, n)


def expert_weight(codes: torch.Tensor, scale: torch.Tensor) -> Fp8Weight:
    """One expert's codes [N, K] and its scales ([N] per channel, [N/128, K/128] per block)."""
    return Fp8Weight(codes, scale, None) if scale.dim() == 1 else Fp8Weight(codes, None, scale)


def quantize_experts(w: torch.Tensor, block: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """w [E, N, K] → (codes [E, N, K], scales): each expert's channel or block amax is 448."""
    e, n, k = w.shape
    codes = torch.empty(w.shape, dtype=E4M3, device=w.device)
    scale = torch.empty(scale_shape(e, n, k, block), dtype=torch.float32, device=w.device)
    for i in range(e):
        q = quantize(w[i], block)
        codes[i] = q.qweight
        scale[i] = q.block_scale if block else q.weight_scale
    return codes, scale


def dequantize_experts(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Codes [N, K] (or stacked [E, N, K]) with their scales → float32, exactly codes × scale."""
    if codes.dim() == 3:
        return torch.stack([dequantize_experts(c, s) for c, s in zip(codes, scale)])
    return expert_weight(codes, scale).dequantize(torch.float32)
