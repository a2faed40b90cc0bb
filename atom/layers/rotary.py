"""Rotary position embedding: a cos/sin table built once; attention applies it (fused with the
KV-cache write by the kernel backend).

Supports the default and llama3 frequency schedules, and the neox (halves) and gptj
(interleaved) layouts.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn


def _llama3_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor = s["factor"]
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_ctx = s["original_max_position_embeddings"]
    low_wl, high_wl = old_ctx / low, old_ctx / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wl) & (wavelen <= low_wl)
    return torch.where(medium, smoothed, scaled)


def _linear_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    return inv_freq / s["factor"]


_SCALINGS = {"llama3": _llama3_inv_freq, "linear": _linear_inv_freq}


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, rotary_dim: int, max_position: int, base: float,
                 scaling: Optional[dict[str, Any]] = None, is_neox: bool = True) -> None:
        super().__init__()
        self.head_dim, self.rotary_dim, self.is_neox = head_dim, rotary_dim, is_neox
        inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
        kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
        if kind != "default":
            if kind not in _SCALINGS:
                raise NotImplementedError(f"rope scaling {kind!r} is not implemented")
            inv_freq = _SCALINGS[kind](inv_freq, scaling)  # type: ignore[arg-type]
        t = torch.arange(max_position, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq)
        cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).float()
        self.register_buffer("cos_sin_cache", cache, persistent=False)


def rope_params(hf: Any) -> tuple[float, Optional[dict[str, Any]]]:
    """(theta, scaling) from an HF config, old spelling (rope_theta/rope_scaling) or new
    (rope_parameters)."""
    params = getattr(hf, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
    scaling = getattr(hf, "rope_scaling", None) or (params if params.get("rope_type", "default")
                                                      != "default" else None)
    return float(theta), scaling
