"""Rotary position embedding: a cos/sin table built once; attention applies it (fused with the
KV-cache write by the kernel backend).

Supports the default, linear, llama3 and yarn frequency schedules, and the neox (halves) and gptj
(interleaved) layouts.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn


def _llama3_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any], base: float) -> torch.Tensor:
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


def _linear_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any], base: float) -> torch.Tensor:
    return inv_freq / s["factor"]


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction for a context stretched by `factor`."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any], base: float) -> torch.Tensor:
    """Interpolates the low frequencies by `factor`, keeps the high ones, and ramps linearly
    between the dimensions that turn beta_slow and beta_fast times over the original context
    (DeepSeek-V3/R1: factor 40 over 4096 positions)."""
    dim = 2 * inv_freq.shape[0]
    old_ctx = s["original_max_position_embeddings"]

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_ctx / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(s.get("beta_fast") or 32), correction_dim(s.get("beta_slow") or 1)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return inv_freq / s["factor"] * ramp + inv_freq * (1 - ramp)


def _yarn_attention_factor(s: dict[str, Any]) -> float:
    """The factor YaRN scales cos and sin by (1.0 when mscale equals mscale_all_dim, as in R1)."""
    if s.get("attention_factor") is not None:
        return float(s["attention_factor"])
    factor, mscale, mscale_all = s["factor"], s.get("mscale"), s.get("mscale_all_dim")
    if mscale and mscale_all:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
    return yarn_mscale(factor)


_SCALINGS = {"llama3": _llama3_inv_freq, "linear": _linear_inv_freq, "yarn": _yarn_inv_freq}


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, rotary_dim: int, max_position: int, base: float,
                 scaling: Optional[dict[str, Any]] = None, is_neox: bool = True) -> None:
        super().__init__()
        self.head_dim, self.rotary_dim, self.is_neox = head_dim, rotary_dim, is_neox
        inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
        kind = rope_kind(scaling)
        magnitude = 1.0
        if kind != "default":
            if kind not in _SCALINGS:
                raise NotImplementedError(f"rope scaling {kind!r} is not implemented")
            inv_freq = _SCALINGS[kind](inv_freq, scaling, base)  # type: ignore[arg-type]
            if kind == "yarn":
                magnitude = _yarn_attention_factor(scaling)  # type: ignore[arg-type]
        t = torch.arange(max_position, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq)
        cache = (torch.cat([freqs.cos(), freqs.sin()], dim=-1) * magnitude).float()
        self.register_buffer("cos_sin_cache", cache, persistent=False)


def rope_kind(scaling: Optional[dict[str, Any]]) -> str:
    return (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"


def partial_rotary_factor(hf: Any) -> float:
    """The share of each head that rotates: a top-level field before transformers 5, a key of
    `rope_parameters` since (where GLM-4.5's 0.5 and MiniMax-M2's `rotary_dim / head_dim` live)."""
    top = getattr(hf, "partial_rotary_factor", None)
    if top is not None:
        return float(top)
    return float((getattr(hf, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0))


def rope_params(hf: Any) -> tuple[float, Optional[dict[str, Any]]]:
    """(theta, scaling) from an HF config, old spelling (rope_theta/rope_scaling) or new
    (rope_parameters)."""
    params = getattr(hf, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
    scaling = getattr(hf, "rope_scaling", None) or (params if params.get("rope_type", "default")
                                                      != "default" else None)
    return float(theta), scaling
