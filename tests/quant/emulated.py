"""transformers models that compute their fp8 linears as an fp8 GEMM does: the oracle for
atom's fp8 path, independent of atom's code.

The weights come dequantized (the checkpoint's twin, or quantized here), so the only other
thing an fp8 GEMM changes is its input: each linear's activations rounded to e4m3 under their
scale (per token: its largest magnitude / 448; per 128-wide group of a token for block-scaled
weights; or the checkpoint's static scale). A forward pre-hook does that to every fp8 module's
input; transformers' fused experts modules (one forward over every expert's 3-D weights) get a
forward that rounds each expert's two GEMM inputs alike.
"""
from __future__ import annotations

import types
from typing import Optional

import torch
import torch.nn.functional as F


def _round(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """e4m3 codes as the GPU quantizers make them: x * (1 / scale), saturated at 448."""
    return (x * (1.0 / scale)).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale


def fake_quant(x: torch.Tensor, activations: str, static: Optional[float] = None) -> torch.Tensor:
    """x rounded to e4m3 under its scale (amax / 448 at least 1e-10, or static) and back."""
    if activations == "static":
        return (x / static).clamp(-448, 448).to(torch.float8_e4m3fn).float() * static
    if activations == "group":
        k = x.shape[-1]
        xp = torch.nn.functional.pad(x, (0, -k % 128)).unflatten(-1, (-1, 128))
        scale = (xp.abs().amax(-1, keepdim=True) / 448).clamp(min=1e-10)
        return _round(xp, scale).flatten(-2)[..., :k]
    return _round(x, (x.abs().amax(-1, keepdim=True) / 448).clamp(min=1e-10))


def emulate_fp8(model: torch.nn.Module, modules: set[str], activations: str,
                static_scales: Optional[dict[str, float]] = None) -> torch.nn.Module:
    """Hooks on `modules` (names in model) quantizing their inputs; returns model."""
    found = set()
    for name, m in model.named_modules():
        if name in modules:
            found.add(name)
            s = None if static_scales is None else static_scales[name]
            m.register_forward_pre_hook(
                lambda _m, args, s=s: (fake_quant(args[0], activations, s),) + args[1:])
    assert found == modules, modules - found
    return model


def quantize_per_channel(w: torch.Tensor) -> torch.Tensor:
    """Online fp8's weight, dequantized: e4m3 codes under each output channel's amax / 448."""
    scale = (w.abs().amax(dim=1, keepdim=True) / 448).clamp(min=1e-12)
    return (w / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale


def _fp8_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor, activations: str) -> torch.Tensor:
    """transformers' experts loop (e.g. DeepseekV3Experts.forward) with both GEMM inputs of
    every expert rounded to e4m3."""
    out = torch.zeros_like(hidden_states)
    for e in top_k_index.unique().tolist():
        tok, slot = (top_k_index == e).nonzero(as_tuple=True)
        gate, up = F.linear(fake_quant(hidden_states[tok], activations),
                            self.gate_up_proj[e]).chunk(2, dim=-1)
        y = F.linear(fake_quant(self.act_fn(gate) * up, activations), self.down_proj[e])
        out.index_add_(0, tok, (y * top_k_weights[tok, slot, None]).to(out.dtype))
    return out


def emulate_fp8_experts(model: torch.nn.Module, modules: set[str],
                        activations: str) -> torch.nn.Module:
    """`modules`: transformers' experts modules (gate_up_proj [E, 2I, H], down_proj
    [E, H, I]) whose experts an fp8 GEMM computes; returns model."""
    found = set()
    for name, m in model.named_modules():
        if name in modules:
            found.add(name)
            m.forward = types.MethodType(
                lambda self, *a, act=activations: _fp8_experts_forward(self, *a, act), m)
    assert found == modules, modules - found
    return model
