"""Stacked expert weights [E, N, K] as fp8 e4m3 codes with float32 scales, the two layouts the
fused MoE kernel takes: one scale per output channel ([E, N]) or per 128 × 128 block
([E, N/128, K/128], DeepSeek-V3's `weight_scale_inv` stacked over experts).

scale = amax / 448 over the channel or block, so the largest magnitude maps to e4m3's largest
finite value. One expert at a time: R1's w13 [256, 4096, 7168] in float32 would be 30 GB.
"""
from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
BLOCK = 128
MIN_SCALE = 1e-12  # an all-zero channel or block: codes 0, not 0 / 0


def quantize_experts(w: torch.Tensor, block: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """w [E, N, K] (N and K multiples of 128 when block) → (codes [E, N, K], scales)."""
    e, n, k = w.shape
    codes = torch.empty(w.shape, dtype=E4M3, device=w.device)
    shape = (e, n // BLOCK, k // BLOCK) if block else (e, n)
    scale = torch.empty(shape, dtype=torch.float32, device=w.device)
    for i in range(e):
        wf = w[i].float()
        if block:
            tiles = wf.view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
            scale[i] = (tiles.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp_min(MIN_SCALE)
            codes[i] = (tiles / scale[i][:, None, :, None]).view(n, k).to(E4M3)
        else:
            scale[i] = (wf.abs().amax(dim=1) / E4M3_MAX).clamp_min(MIN_SCALE)
            codes[i] = (wf / scale[i][:, None]).to(E4M3)
    return codes, scale


def dequantize_experts(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes [..., N, K] with their scales [..., N] or [..., N/128, K/128] → float32."""
    if scale.dim() == codes.dim() - 1:
        return codes.float() * scale[..., None]
    return codes.float() * scale.repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
