"""Fused per-head q/k RMSNorm + rotary against the unfused torch reference."""
import pytest
import torch

from atom.kernels import torch_ref
from atom.kernels.triton.qk_norm_rotary import qk_norm_rotary
from kernel_helpers import DEVICE, gpu_param, rel_err, tol


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("tokens,hq,hk,d,dtype", [
    pytest.param(5, 4, 2, 16, torch.float32, id="small-f32"),
    pytest.param(3, 2, 1, 32, torch.bfloat16, id="small-bf16"),
    gpu_param(300, 16, 8, 128, torch.bfloat16, id="qwen3-0.6b"),
])
def test_qk_norm_rotary_matches_unfused(tokens, hq, hk, d, dtype, is_neox):
    qkv = (3 * torch.randn(tokens, (hq + 2 * hk) * d, device=DEVICE)).to(dtype)
    q = qkv[:, :hq * d].view(tokens, hq, d)
    k = qkv[:, hq * d:(hq + hk) * d].view(tokens, hk, d)
    qw = (1 + 0.2 * torch.randn(d, device=DEVICE)).to(dtype)
    kw = (1 + 0.2 * torch.randn(d, device=DEVICE)).to(dtype)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=DEVICE).float() / d))
    ang = torch.arange(2048, device=DEVICE).float()[:, None] * inv[None, :]
    cache = torch.cat([ang.cos(), ang.sin()], dim=-1)
    pos = torch.randint(0, 2048, (tokens,), device=DEVICE)
    q_ref, k_ref = torch_ref.rotary(pos, torch_ref.rms_norm(q, qw, 1e-6),
                                    torch_ref.rms_norm(k, kw, 1e-6), cache, is_neox)
    v_before = qkv[:, (hq + hk) * d:].clone()
    q_out, k_out = qk_norm_rotary(pos, q, k, qw, kw, 1e-6, cache, is_neox)
    assert rel_err(q_out, q_ref) < tol(dtype)
    assert rel_err(k_out, k_ref) < tol(dtype)
    assert torch.equal(qkv[:, (hq + hk) * d:], v_before), "touched v"
