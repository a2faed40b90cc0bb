"""transformers attention over K and V as an fp8 KV cache holds them: the oracle for atom's fp8
cache with a checkpoint's scales, independent of atom's code.

The cache keeps each layer's K (after rotary) and V as e4m3 codes of x / scale, saturated at
448, and attention reads code * scale; every token's K and V, the current step's included, is
read back from the cache. So the reference rounds the K and V that reach transformers'
attention function (sdpa), under the layer's (k_scale, v_scale), and attends over those. The
same function records each layer's largest |K| and |V|: a calibration pass.
"""
from __future__ import annotations

import torch

_NAME = "fp8_kv_reference"  # the attention implementation the models here are switched to


def _round(x: torch.Tensor, scale: float) -> torch.Tensor:
    return (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale


def _attention(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    amax = getattr(module, "kv_amax", None)
    if amax is not None:
        amax[0] = max(amax[0], float(key.abs().max()))
        amax[1] = max(amax[1], float(value.abs().max()))
    scales = getattr(module, "fp8_kv_scales", None)
    if scales is not None:
        key, value = _round(key.float(), scales[0]), _round(value.float(), scales[1])
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _attention_modules(model: torch.nn.Module) -> dict[int, torch.nn.Module]:
    from transformers import AttentionInterface

    AttentionInterface.register(_NAME, _attention)
    model.set_attn_implementation(_NAME)
    mods = {m.layer_idx: m for m in model.modules()
            if hasattr(m, "layer_idx") and hasattr(m, "k_proj")}
    assert mods, "no attention layers found"
    return mods


def emulate_fp8_kv(model: torch.nn.Module,
                   scales: dict[int, tuple[float, float]]) -> torch.nn.Module:
    """`model` attending over K and V rounded under each layer's `scales`; returns model."""
    mods = _attention_modules(model)
    assert set(mods) == set(scales), (sorted(mods), sorted(scales))
    for i, m in mods.items():
        m.fp8_kv_scales = scales[i]
    return model


def record_kv_amax(model: torch.nn.Module) -> dict[int, list[float]]:
    """{layer: [max |K|, max |V|]}, updated by every forward of `model` from now on."""
    mods = _attention_modules(model)
    amax = {i: [0.0, 0.0] for i in mods}
    for i, m in mods.items():
        m.kv_amax = amax[i]
    return amax
